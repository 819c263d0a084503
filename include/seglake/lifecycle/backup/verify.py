"""Verify a bundle in a backup target (issue 19 item 7): is it restorable, byte for byte?

    the bundle document (commit marker, its SHA-256, format, segments <-> files)
    -> every data file it lists: present, its size, its SHA-256 (read in full)
    -> every insert and delete log: its Parquet row count against the entries the
       segment records give it

The report names every bad file (source key, data key, what is wrong); `ok` only when
there is none. Files are read by a bounded thread pool (the units are the data files).
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from seglake import limits
from seglake.errors import NotFound
from seglake.lifecycle.backup import bundle as bundles
from seglake.meta.catalog import DEFAULT_DB
from seglake.progress import human_bytes
from seglake.storage import Store, layout

log = logging.getLogger("seglake.backup")
MAX_PROBLEMS = 1000


def verify(target: Store, collection: str, bundle: str, *, db: str = DEFAULT_DB, threads: int = 8,
           meta=None, say=log.warning) -> dict:
    """The verification report of one bundle (recorded in etcd when `meta` is given)."""
    bundles.check_names(db, collection, bundle)
    threads = int(limits.check("copy_threads", "threads", threads))
    started = time.time()
    where = f"{db}.{collection}/{bundle}"
    problems: list[dict] = []
    try:
        doc = bundles.read(target, db, collection, bundle)
    except (bundles.BundleError, NotFound) as e:
        report = {"bundle": bundle, "db": db, "collection": collection, "ok": False, "files": 0, "bytes": 0,
                  "problems": [{"file": "bundle.json", "problem": str(e)}], "checked_at": started}
        _record(meta, report)
        return report
    rows: dict[str, int] = {}   # source key -> rows the segment records give it
    for e in doc["segments"]:
        for fl in e["binlogs"]:
            for x in fl["logs"]:
                rows[x["path"]] = x["entries"]
        for x in e["deltalogs"]:
            rows[x["path"]] = x["entries"]
    by_sha: dict[str, list[str]] = {}
    for key, f in doc["files"].items():
        by_sha.setdefault(f["sha256"], []).append(key)

    def one(sha: str) -> list[dict]:
        keys = by_sha[sha]
        size = doc["files"][keys[0]]["size"]
        blob = layout.bundle_blob(sha)
        try:
            got, n = bundles.sha256_of(target, blob)
        except NotFound:
            return [{"file": k, "data": blob, "problem": "missing from the backup target"} for k in keys]
        if n != size or got != sha:
            return [{"file": k, "data": blob, "problem": f"content differs: {n} bytes with SHA-256 {got[:16]}..., "
                                                          f"the bundle lists {size} bytes"} for k in keys]
        out = []
        for k in keys:
            if k in rows:
                try:
                    import pyarrow.parquet as pq
                    with target.open_read(blob) as fh:
                        have = pq.ParquetFile(fh).metadata.num_rows
                except Exception as e:  # noqa: BLE001 - an unreadable log is a finding, not a crash
                    out.append({"file": k, "data": blob, "problem": f"not a readable Parquet file: {e}"})
                    continue
                if have != rows[k]:
                    out.append({"file": k, "data": blob, "problem": f"holds {have} rows; the segment records "
                                                                    f"give it {rows[k]}"})
        return out

    with ThreadPoolExecutor(max(1, threads)) as pool:
        for found in pool.map(one, sorted(by_sha)):
            problems.extend(found)
    total = sum(f["size"] for f in doc["files"].values())
    report = {"bundle": bundle, "db": db, "collection": collection, "uid": doc["uid"], "ok": not problems,
              "files": len(doc["files"]), "data_files": len(by_sha), "bytes": total, "rows": doc["totals"]["rows"],
              "problems": problems[:MAX_PROBLEMS], "problem_count": len(problems), "checked_at": started,
              "seconds": round(time.time() - started, 3)}
    say(f"verify {where}: {'OK' if report['ok'] else f'{len(problems)} BAD FILES'}; {len(by_sha)} data files, "
        f"{human_bytes(total)}, {report['seconds']} s")
    for p in problems[:20]:
        say(f"verify {where}: BAD {p['file']}: {p['problem']}")
    _record(meta, report)
    return report


def _record(meta, report: dict) -> None:
    if meta is None:
        return
    meta.kv.put(meta.keys.backup_verify(report["db"], report["collection"], report["bundle"]),
                json.dumps({k: v for k, v in report.items() if k != "problems"} |
                           {"problems": report["problems"][:20]}))


def list_verifications(meta) -> list[dict]:
    return [json.loads(kv.value) for kv in meta.kv.range(meta.keys.backup_verify_prefix())]



