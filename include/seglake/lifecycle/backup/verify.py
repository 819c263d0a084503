"""Verify a bundle in a backup target (issue 19 item 7): is it restorable, byte for byte?

    the bundle document (commit marker, its SHA-256, format, segments <-> files)
    -> every data file it lists: present, its size, its SHA-256 (read in full)
    -> every insert and delete log: its Parquet row count against the entries the
       segment records give it

The report names every bad file (source key, data key, what is wrong); `ok` only when
there is none. The units are the distinct data files: checked by a bounded thread pool
inline, or spread over Spark executors (spark/jobs/verify_bundle.py) for big bundles.
"""

from __future__ import annotations

import json
import logging
import time

from seglake.meta import codec
from seglake import runners
from seglake import limits
from seglake.errors import NotFound
from seglake import manifest
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import holds
from seglake.meta.catalog import DEFAULT_DB
from seglake.progress import human_bytes
from seglake.segfiles import ROW_ID, ROW_ID_FIELD, TIMESTAMP, TS_FIELD
from seglake.storage import Store, layout

log = logging.getLogger("seglake.backup")
MAX_PROBLEMS = 1000


def plan(target: Store, collection: str, bundle: str, *, db: str = DEFAULT_DB) -> dict:
    """The units of a bundle's verification, from its document: one per distinct data
    file (sha256, size, the source keys that name it, the rows each log should hold).
    `problem` instead of units when the document itself is bad."""
    bundles.check_names(db, collection, bundle)
    base = {"bundle": bundle, "db": db, "collection": collection, "target": target.uri}
    try:
        doc = bundles.read(target, db, collection, bundle)
    except (bundles.BundleError, NotFound) as e:
        return {**base, "problem": str(e), "units": [], "files": 0, "bytes": 0}
    try:   # (a Milvus capture states no such totals)
        if doc.get("kind") is None:
            bundles.check_totals(doc, f"bundle {db}.{collection}/{bundle}")
        stated = []
    except bundles.BundleError as e:
        stated = [{"file": "bundle.json", "problem": str(e)}]
    return {**base, "uid": doc["uid"], "units": units_of(doc), "files": len(doc["files"]),
            "bytes": sum(f["size"] for f in doc["files"].values()), "rows": doc["totals"]["rows"],
            "doc_problems": stated}


def units_of(doc: dict) -> list[dict]:
    """One unit per distinct data file of a (checked) bundle document: its sha256, size,
    the source keys that name it, and the rows each log should hold (an import checks
    the same units before it writes)."""
    if doc.get("kind") == "milvus":
        from seglake.milvus import bundledoc
        return bundledoc.units_of(doc)
    rows: dict[str, int] = {}   # source key -> rows the segment records give it
    stamps: dict[str, list[int]] = {}   # Timestamp / delta log -> the [ts_from, ts_to] its entry lists
    named: dict[str, list[int]] = {}   # delta log -> the partition ids its deletes may name
    column: dict[str, str] = {}  # insert log -> the one column its field's log holds
    bundle_parts = sorted(p["partition_id"] for p in doc["snapshot"]["collection"]["partitions"])
    names = {ROW_ID_FIELD: ROW_ID, TS_FIELD: TIMESTAMP,
             **{f["field_id"]: f["name"] for f in doc["snapshot"]["collection"]["schema"]}}
    for e in doc["segments"]:
        for fl in e["binlogs"]:
            for x in fl["logs"]:
                rows[x["path"]] = x["entries"]
                if fl["field_id"] in names:
                    column[x["path"]] = names[fl["field_id"]]
                if fl["field_id"] == TS_FIELD:
                    stamps[x["path"]] = [x["ts_from"], x["ts_to"]]
        dp = manifest.delta_partitions(e)
        for x in e["deltalogs"]:
            rows[x["path"]] = x["entries"]
            named[x["path"]] = bundle_parts if dp is None else sorted(dp)
            stamps[x["path"]] = [x["ts_from"], x["ts_to"]]
    by_sha: dict[str, list[str]] = {}
    for key, f in doc["files"].items():
        by_sha.setdefault(f["sha256"], []).append(key)
    return [{"sha": sha, "size": doc["files"][keys[0]]["size"], "keys": sorted(keys),
             "rows": {k: rows[k] for k in keys if k in rows},
             "partitions": {k: named[k] for k in keys if k in named},
             "columns": {k: column[k] for k in keys if k in column},
             "stamps": {k: stamps[k] for k in keys if k in stamps}} for sha, keys in sorted(by_sha.items())]


def check_unit(target: Store, unit: dict, throttle=None) -> list[dict]:
    """One data file: present, its size and SHA-256; for a log, its Parquet row count.
    `throttle`: the reads take their cost from that rate limit."""
    if "milvus" in unit:   # a Milvus capture's file: its binlogs are Milvus's event files
        from seglake.milvus import bundledoc
        return bundledoc.check_unit(target, unit, throttle)
    sha, size, keys = unit["sha"], unit["size"], unit["keys"]
    blob = layout.bundle_blob(sha)
    try:
        if throttle is not None:
            throttle.acquire(0, 1)
        got, n = bundles.sha256_of(target, blob, on_chunk=None if throttle is None else
                                   (lambda c: throttle.acquire(c, 0)))
    except NotFound:
        return [{"file": k, "data": blob, "problem": "missing from the backup target"} for k in keys]
    if n != size or got != sha:
        return [{"file": k, "data": blob, "problem": f"content differs: {n} bytes with SHA-256 {got[:16]}..., "
                                                      f"the bundle lists {size} bytes"} for k in keys]
    named, columns, stamps = unit.get("partitions", {}), unit.get("columns", {}), unit.get("stamps", {})
    return [{"file": k, "data": blob, "problem": p} for k, want in unit["rows"].items()
            for p in log_problems(target, blob, want, named.get(k), columns.get(k), stamps.get(k))]


def log_problems(store: Store, key: str, rows: int, allowed: list[int] | None, column: str | None = None,
                 stamps: list[int] | None = None) -> list[str]:
    """What is wrong with the log at `key` (in any store) against what its segment's
    records give it (log_problems_of). A store that cannot be read raises (a transient
    failure is no finding about the file)."""
    with store.open_read(key) as fh:
        return log_problems_of(fh, rows, allowed, column, stamps)


def log_problems_of(fh, rows: int, allowed: list[int] | None, column: str | None = None,
                    stamps: list[int] | None = None) -> list[str]:
    """What is wrong with a log (a seekable file object) against what its segment's
    records give it: its row count; for an insert log (`column`: its field's name) that
    it holds that one column (the log of another field with the same row count passes
    every other check); for a delta log (`allowed`: the partition ids its segment's
    delta_partitions names) deletes scoped to an id not named; for a Timestamp log or a
    delta log (`stamps`: the [ts_from, ts_to] its log entry lists, which an import and a
    restore check against this store's clock) a timestamp outside that range -- rows or
    deletes stamped above every timestamp the store issues later would never be hidden
    by a later delete, or would hide every later insert. [] when nothing is (a restore
    from a bundle checks each log it copies the same way, before it writes it)."""
    import numpy as np

    from seglake.parquet import open_checked

    try:   # one open and one read per log, whole: every page written with a CRC-32 is checked
        f = open_checked(fh)
        t = f.read()
        cols = list(f.schema_arrow.names)
        have, stray, outside = f.metadata.num_rows, [], []
        if t.num_rows != have:
            return [f"reads {t.num_rows} rows; its footer says {have}"]
        if allowed is not None and "partition" in cols:
            ids = np.unique(t.column("partition").to_numpy())
            ok = set(allowed)
            stray = sorted(int(x) for x in ids if x != 0 and int(x) not in ok)
        ts_col = next((c for c in (TIMESTAMP, "ts") if c in cols), None)
        if stamps is not None and ts_col is not None and have:
            ts = t.column(ts_col).to_numpy().astype(np.int64)
            lo, hi = int(ts.min()), int(ts.max())
            outside = sorted({x for x in (lo, hi) if not stamps[0] <= x <= stamps[1]})
    except Exception as e:  # noqa: BLE001 - an unreadable log is a finding, not a crash
        return [f"not a readable Parquet file: {e}"]
    out = []
    if outside:
        out.append(f"holds timestamps {', '.join(map(str, outside))} outside the range its log entry lists "
                   f"[{stamps[0]}, {stamps[1]}] (the range checked against this store's clock)")
    if column is not None and cols != [column]:
        out.append(f"holds columns {cols}; the log of field {column!r} holds that one column")
    if have != rows:
        out.append(f"holds {have} rows; the segment records give it {rows}")
    if stray:
        out.append(f"holds deletes scoped to partition ids {stray}, which its segment's delta_partitions does not "
                   f"name")
    return out


def check_units(target: Store, units: list[dict], threads: int, throttle=None) -> list[dict]:
    """Every unit by a bounded thread pool; the problems found."""
    problems: list[dict] = []
    for found in runners.run_inline(lambda u: check_unit(target, u, throttle), units,
                                    workers=runners.io_threads(threads, target)):
        problems.extend(found)
    return problems


def check_partition(units, settings_env: dict, backup_uri: str | None) -> list[dict]:
    """Executor side of the Spark engine: open the backup target from the settings
    environment the driver handed over and check a partition's units."""

    settings = runners.worker_settings(settings_env)
    return check_units(bundles.open_target(settings, backup_uri), list(units), settings.copy_threads)


def summarize(planned: dict, problems: list[dict], started: float, engine: str = "inline") -> dict:
    """The report of a planned verification and the problems its units found."""
    if "problem" in planned:
        problems = [{"file": "bundle.json", "problem": planned["problem"]}]
        return {k: planned[k] for k in ("bundle", "db", "collection", "target", "files", "bytes")} | {
            "ok": False, "problems": problems, "problem_count": 1, "checked_at": started, "engine": engine,
            "seconds": round(time.time() - started, 3)}
    problems = sorted([*problems, *planned.get("doc_problems", ())], key=lambda p: (p["file"], p["problem"]))
    return {k: planned[k] for k in ("bundle", "db", "collection", "target", "uid", "files", "bytes", "rows")} | {
        "ok": not problems, "data_files": len(planned["units"]), "problems": problems[:MAX_PROBLEMS],
        "problem_count": len(problems), "checked_at": started, "engine": engine,
        "seconds": round(time.time() - started, 3)}


def say_report(report: dict, say) -> None:
    where = f"{report['db']}.{report['collection']}/{report['bundle']}"
    verdict = "OK" if report["ok"] else f"{report['problem_count']} BAD FILES"
    say(f"verify {where}: {verdict}; "
        f"{report.get('data_files', 0)} data files, {human_bytes(report['bytes'])}, {report['seconds']} s"
        f" ({report['engine']})")
    for p in report["problems"][:20]:
        say(f"verify {where}: BAD {p['file']}: {p['problem']}")


def verify(target: Store, collection: str, bundle: str, *, db: str = DEFAULT_DB, threads: int = 8,
           meta=None, say=log.warning) -> dict:
    """The verification report of one bundle, checked inline (recorded in etcd when
    `meta` is given). The Spark engine: spark/jobs/verify_bundle.py."""
    threads = int(limits.check("copy_threads", "threads", threads))
    started = time.time()
    with holds.held(target, db, collection, bundle, by="verify", say=say):   # not pruned while read
        planned = plan(target, collection, bundle, db=db)
        report = summarize(planned, check_units(target, planned["units"], threads), started)
    say_report(report, say)
    record(meta, report)
    return report


def record(meta, report: dict) -> None:
    if meta is None:
        return
    meta.kv.put(meta.keys.backup_verify(report["db"], report["collection"], report["bundle"]),
                json.dumps({k: v for k, v in report.items() if k != "problems"} |
                           {"problems": report["problems"][:20]}))


def recorded(meta, db: str, collection: str, bundle: str) -> dict | None:
    """The last verification recorded for a bundle (problems cut to 20), None if none."""
    kv = meta.kv.get(meta.keys.backup_verify(db, collection, bundle))
    return None if kv is None else codec.loads(kv.value, kv.key)


def list_verifications(meta) -> list[dict]:
    return codec.readable(meta.kv.range(meta.keys.backup_verify_prefix()))



