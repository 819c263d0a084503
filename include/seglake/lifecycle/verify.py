"""Verify a collection: every file its segment metadata references exists, has the
recorded size, and (Parquet logs) reads whole -- every page written with a CRC-32
(segfiles.put_parquet) checked -- with the recorded number of rows; then count its
visible rows with the one visibility function (seglake.visibility: rows of Flushed
segments no delete hides, duplicate pks counted twice -- Milvus's count(*)).

The work splits into `plan` (metadata -> file checks, plus metadata-only checks),
`check_file` (one object; runs on Spark executors or in a thread pool), `count_visible`
(on the driver, only when every file checked out) and `summarize` (results -> report).
The Spark job and the inline path call the same functions.
Read-only: verification never writes anything but its report.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

from seglake import runners
from seglake.errors import NotFound
from seglake.meta import Meta
from seglake.meta.catalog import DEFAULT_DB
from seglake.meta.segments import DROPPED
from seglake.storage import Store, layout

MISSING, SIZE, ROWS, UNREADABLE, META = "missing", "size_mismatch", "rows_mismatch", "unreadable", "metadata"
VISIBILITY = "visibility"


def plan(meta: Meta, name: str, db: str = DEFAULT_DB) -> dict:
    """The collection's live segments and one check per referenced file."""
    coll = meta.catalog.get_by_name(name, db)
    segments, checks, problems = [], [], []
    for seg in meta.segments.list(coll.collection_id):
        if seg.state == DROPPED:
            continue
        segments.append({"segment_id": seg.segment_id, "partition_id": seg.partition_id,
                         "state": seg.state, "num_rows": seg.num_rows})
        for field_id, logs in seg.binlogs.items():
            entries = sum(b.entries for b in logs)
            if entries != seg.num_rows:
                problems.append(_problem(seg.segment_id, "", META, seg.num_rows, entries,
                                         f"field {field_id} binlogs hold {entries} rows, segment says {seg.num_rows}"))
        for f in layout.segment_files(seg):
            checks.append({"segment_id": seg.segment_id, "key": f.key, "kind": f.kind,
                           "size": f.size, "entries": f.entries if f.kind in ("insert", "delta") else None})
    return {"collection": coll.name, "collection_id": coll.collection_id, "db": coll.db,
            "segments": segments, "checks": checks, "problems": problems}


def check_file(store: Store, check: dict) -> dict | None:
    """None if the file is as recorded, else a problem record."""
    seg, key = check["segment_id"], check["key"]
    try:
        info = store.head(key)
    except NotFound:
        return _problem(seg, key, MISSING, check["size"], None, "file does not exist")
    if info.size != check["size"]:
        return _problem(seg, key, SIZE, check["size"], info.size,
                        f"size {info.size} bytes, metadata says {check['size']}")
    if check.get("entries") is not None:
        from seglake.parquet import open_checked
        try:   # read whole: every page written with a CRC is checked (content, not size)
            with store.open_read(key) as f:
                rows = open_checked(f).read().num_rows
        except Exception as e:  # noqa: BLE001 - any decode failure is a finding, not a crash
            return _problem(seg, key, UNREADABLE, check["entries"], None, f"not readable as Parquet: {e}")
        if rows != check["entries"]:
            return _problem(seg, key, ROWS, check["entries"], rows,
                            f"{rows} rows in file, metadata says {check['entries']}")
    return None


def check_files(store: Store, checks: Iterable[dict], threads: int = 8) -> list[dict]:
    checks = list(checks)
    results = runners.run_inline(lambda c: check_file(store, c), checks,
                                 workers=1 if len(checks) < 16 else threads)
    return [r for r in results if r is not None]


def check_partition(checks: Iterable[dict], settings_env: dict) -> Iterable[dict]:
    """Executor side of the Spark engine: open the store from the settings environment
    the driver handed over and check a partition's files (threads only on S3)."""
    from seglake.storage import open_store

    settings = runners.worker_settings(settings_env)
    yield from check_files(open_store(settings), list(checks), threads=settings.copy_threads if settings.is_s3 else 1)


def count_visible(meta: Meta, store: Store, planned: dict, file_problems: list[dict]) -> tuple[int | None, list[dict]]:
    """(visible rows of the collection's Flushed segments, problems): None without a
    count when a file check failed (the rows cannot be read whole), or with a
    `visibility` problem when reading them for the count fails."""
    from seglake.visibility import visible_count

    if file_problems:
        return None, []
    try:
        return visible_count(meta, store, planned["collection_id"]), []
    except Exception as e:  # noqa: BLE001 - any failure to read the rows is a finding
        return None, [_problem(0, "", VISIBILITY, None, None, f"visible rows could not be counted: {e}")]


def summarize(planned: dict, file_problems: list[dict], visible: int | None = None) -> dict:
    """The report. `visible`: count_visible's count (None: not counted)."""
    problems = planned["problems"] + sorted(file_problems, key=lambda p: (p["segment_id"], p["key"]))
    by_segment = defaultdict(list)
    for p in problems:
        by_segment[p["segment_id"]].append(p)
    return {
        "collection": planned["collection"], "collection_id": planned["collection_id"], "db": planned["db"],
        "ok": not problems,
        "segments_checked": len(planned["segments"]),
        "files_checked": len(planned["checks"]),
        "bytes_checked": sum(c["size"] for c in planned["checks"]),
        "rows": sum(s["num_rows"] for s in planned["segments"]),
        "visible_rows": visible,
        "problem_counts": dict(Counter(p["problem"] for p in problems)),
        "bad_segments": sorted(by_segment),
        "problems": problems,
    }


def verify_collection(meta: Meta, store: Store, name: str, db: str = DEFAULT_DB, threads: int = 8) -> dict:
    """Inline verification (no Spark): plan, check every file, count visible rows, summarize."""
    planned = plan(meta, name, db)
    problems = check_files(store, planned["checks"], threads)
    visible, more = count_visible(meta, store, planned, problems)
    return summarize(planned, problems + more, visible)


def format_report(report: dict, limit: int = 20) -> str:
    head = (f"collection {report['collection']!r} (id {report['collection_id']}): "
            f"{report['segments_checked']} segments, {report['files_checked']} files, "
            f"{report['bytes_checked']} bytes, {report['rows']} rows"
            + ("" if report.get("visible_rows") is None else f" ({report['visible_rows']} visible)"))
    if report["ok"]:
        return head + " -- all files present, sizes and row counts match"
    counts = ", ".join(f"{n} {k}" for k, n in sorted(report["problem_counts"].items()))
    lines = [head, f"PROBLEMS in {len(report['bad_segments'])} segment(s): {counts}"]
    for p in report["problems"][:limit]:
        lines.append(f"  segment {p['segment_id']}: {p['problem']}: {p['key'] or '-'}: {p['detail']}")
    if len(report["problems"]) > limit:
        lines.append(f"  ... and {len(report['problems']) - limit} more")
    return "\n".join(lines)


def _problem(segment_id, key, problem, expected, actual, detail) -> dict:
    return {"segment_id": segment_id, "key": key, "problem": problem,
            "expected": expected, "actual": actual, "detail": detail}


def segment_rows(meta: Meta, store: Store, collection_id: int, states: Iterable[str] | None = None
                 ) -> tuple[list[int], list[int]]:
    """(primary keys in the pk binlogs, primary keys in the delta logs) of the
    collection's segments in `states` (every segment when None), each sorted: what the
    store holds, read back file by file (for checks of what was written where).
    Duplicates are kept, so a row written twice shows up twice. This is NOT the visible
    row set (a pk deleted and written again is in both lists): for that, use
    seglake.visibility.visible_rows / visible_count."""
    from seglake.parquet import open_checked

    pk = meta.catalog.get(collection_id).schema.primary
    pks: list[int] = []
    deleted: list[int] = []
    for seg in meta.segments.list(collection_id, states=None if states is None else list(states)):
        for b in seg.binlogs.get(pk.field_id, ()):
            key = layout.insert_log(seg.collection_id, seg.partition_id, seg.segment_id, pk.field_id, b.log_id)
            with store.open_read(key) as f:
                pks += open_checked(f).read(columns=[pk.name]).column(0).to_pylist()
        for b in seg.deltalogs:
            with store.open_read(layout.delta_log(seg.collection_id, seg.partition_id, seg.segment_id,
                                                  b.log_id)) as f:
                deleted += open_checked(f).read(columns=["pk"]).column(0).to_pylist()
    return sorted(pks), sorted(deleted)
