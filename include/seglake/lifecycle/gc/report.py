"""The candidate report a mark writes under _gc/{run}/ and a sweep reads back (only the
exact bytes the mark wrote), and the run's summary."""

from __future__ import annotations

import hashlib
import io
import re

from seglake.meta import codec
from seglake.errors import NotFound, ValidationError
from seglake.lifecycle.gc.options import GCError
from seglake.storage import Store, layout

# -- the candidate report: _gc/{run}/candidates/part-N.parquet (+ dropped/part-N.parquet) --------
# Every file of one Dropped segment, and the segment itself, are in the same part: a sweep of
# that part alone knows when the segment's record may go. summary.json lists the parts
# written ([index, candidates, dropped segments, sha256 of the candidates file, sha256 of the
# dropped file]): the sweep reads only those parts and only with those exact bytes, so a part
# another mark of the same run id wrote (a retried or zombie task, a reused id), a copied,
# truncated or edited part is refused before anything in it is deleted. Reports of earlier
# versions ([index, candidates, dropped] without digests; candidates.parquet + dropped.json
# without a part list) are read with their counts checked only.
CANDIDATES, DROPPED_PARTS, LEGACY_PART = "candidates", "dropped", -1
_RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}", re.ASCII)


def check_run_id(run_id) -> str:
    """A run id names one directory under _gc/: letters, digits, '_', '.', '-' (not
    starting with '.' or '-'), at most 200 characters, full match. ValidationError
    before any side effect otherwise."""
    if not isinstance(run_id, str) or _RUN_ID.fullmatch(run_id) is None:
        raise ValidationError(f"gc run id {run_id!r} must be 1-200 letters, digits, '_', '.' or '-', "
                              "starting with a letter, digit or '_'")
    return run_id
_REPORT_COLUMNS = (("path", "string"), ("size", "int64"), ("mtime", "float64"), ("reason", "string"),
                   ("collection_id", "int64"), ("segment_id", "int64"))
_DROPPED_COLUMNS = (("collection_id", "int64"), ("partition_id", "int64"), ("segment_id", "int64"))


def part_key(run_id: str, kind: str, index: int) -> str:
    return layout.gc_part(run_id, kind, index)


def _put_parquet(store: Store, key: str, columns, rows: list) -> str:
    """Write rows as one Parquet object; returns the sha256 of the bytes written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({name: pa.array([r[i] if isinstance(r, (tuple, list)) else r[name] for r in rows],
                                     getattr(pa, typ)()) for i, (name, typ) in enumerate(columns)})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data = sink.getvalue().to_pybytes()
    store.put(key, data)
    return hashlib.sha256(data).hexdigest()


def _get_parquet(store: Store, key: str, sha256: str | None = None) -> list[dict]:
    """The rows of one Parquet object; with `sha256`, only if its bytes have that digest
    (GCError otherwise)."""
    import pyarrow.parquet as pq
    data = store.get(key)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise GCError(f"{key} is not the file its mark wrote (sha256 differs): damaged or replaced, "
                      "nothing in it deleted")
    return pq.read_table(io.BytesIO(data)).to_pylist()


def write_part(store: Store, run_id: str, index: int, candidates: list[dict],
               dropped: list[tuple[int, int, int]]) -> list | None:
    """Write one part of the report (nothing when it has neither candidates nor dropped
    segments); returns its entry for summary.json, which binds the part to these exact
    bytes. Re-writing a part is harmless: only the entry in the summary counts."""
    if not candidates and not dropped:
        return None
    c = _put_parquet(store, part_key(run_id, CANDIDATES, index), _REPORT_COLUMNS, candidates)
    d = _put_parquet(store, part_key(run_id, DROPPED_PARTS, index), _DROPPED_COLUMNS, list(dropped))
    return [index, len(candidates), len(dropped), c, d]


def report_parts(summary: dict) -> list[list]:
    """The parts summary.json lists, each index once (GCError otherwise)."""
    if "report_parts" not in summary:
        return [[LEGACY_PART, summary.get("candidates", 0), -1]]
    parts = [list(p) for p in summary["report_parts"]]
    indexes = [p[0] if p else None for p in parts]
    if any(len(p) not in (3, 5) for p in parts) or len(set(indexes)) != len(indexes):
        raise GCError(f"gc run {summary.get('run_id')!r}: its summary lists report parts twice or malformed: "
                      "damaged, nothing deleted")
    return parts


def read_part(store: Store, run_id: str, part: list) -> tuple[list[dict], list[tuple[int, int, int]]]:
    """(candidates, dropped segments (c, p, s)) of one part, exactly the bytes summary.json
    names for it (its sha256) and with its counts. GCError for a damaged or replaced part."""
    index, n, k = part[:3]
    want_c, want_d = part[3:5] if len(part) == 5 else (None, None)
    try:
        if index == LEGACY_PART:
            candidates = _get_parquet(store, layout.gc_run_file(run_id, "candidates.parquet"))
            try:
                dropped = [tuple(x) for x in read_json(store, run_id, "dropped.json")["segments"]]
            except NotFound:
                dropped = []  # written before dropped segments were marked: nothing to remove
            return candidates, dropped
        candidates = _get_parquet(store, part_key(run_id, CANDIDATES, index), want_c)
        dropped = [(d["collection_id"], d["partition_id"], d["segment_id"])
                   for d in _get_parquet(store, part_key(run_id, DROPPED_PARTS, index), want_d)]
    except NotFound:
        raise NotFound(f"gc run {run_id!r}: report part {index} is missing") from None
    if len(candidates) != n or len(dropped) != k:
        raise GCError(f"gc run {run_id!r}: report part {index} holds {len(candidates)} candidates and "
                      f"{len(dropped)} dropped segments, its summary says {n} and {k}: damaged, nothing deleted")
    return candidates, dropped


def sweep_plan(store: Store, run_id: str) -> tuple[int, list[list]]:
    """(the mark's reference revision, its report parts) for a sweep of `run_id`, both
    engines. Refused (GCError) for a dry run's mark: a dry run promises no delete, now or
    later; a real run marks again."""
    summary = read_json(store, check_run_id(run_id), "summary.json")
    if summary.get("dry_run"):
        raise GCError(f"gc run {run_id!r} was a dry run: its report is never swept (run GC without dry_run); "
                      "nothing deleted")
    return summary["refs_revision"], report_parts(summary)


def read_report(store: Store, run_id: str) -> list[dict]:
    """Every candidate of a run's report (tests, the CLI, small reports only)."""
    try:
        summary = read_json(store, run_id, "summary.json")
    except NotFound:
        raise NotFound(f"no gc report for run {run_id!r}") from None
    return [c for p in report_parts(summary) for c in read_part(store, run_id, p)[0]]


def read_json(store: Store, run_id: str, name: str) -> dict:
    try:
        return codec.loads(store.get(layout.gc_run_file(run_id, name)), layout.gc_run_file(run_id, name))
    except NotFound:
        raise NotFound(f"gc run {run_id!r} has no {name}; run its mark first") from None


def latest_summary(store: Store) -> dict:
    try:
        run_id = codec.loads(store.get(layout.GC_LATEST), layout.GC_LATEST)["run_id"]
    except NotFound:
        raise NotFound("no gc run has been recorded yet") from None
    return codec.loads(store.get(layout.gc_run_file(run_id, "summary.json")), layout.gc_run_file(run_id, "summary.json"))
