"""The whole GC inline (mark, then sweep and records unless a dry run) and its summary
as text."""

from __future__ import annotations

from seglake.lifecycle.gc.marking import mark, new_run_id
from seglake.lifecycle.gc.options import GCOptions
from seglake.lifecycle.gc.records import clean_records
from seglake.lifecycle.gc.refs import load_references
from seglake.lifecycle.gc.report import check_run_id
from seglake.lifecycle.gc.sweeping import sweep
from seglake.meta import Meta
from seglake.storage import Store


def run(meta: Meta, store: Store, opts: GCOptions, run_id: str | None = None) -> dict:
    """The whole GC, inline: mark, then (unless dry run) sweep and records. The dry
    run's `mark` (candidates, dropped) is what the real run's sweep deletes."""
    opts.check()
    run_id = check_run_id(new_run_id() if run_id is None else run_id)
    refs = load_references(meta, store)
    m = mark(meta, store, opts, run_id=run_id, refs=refs)
    result = {"mark": m.summary(), "dry_run": opts.dry_run}
    result["dropped"] = dict(result["mark"]["dropped"])
    if opts.dry_run:
        return result
    s = sweep(meta, store, m.run_id, refs=refs).summary()
    result["sweep"] = s
    result["dropped"] = {**s["dropped"], "kept_referenced_or_skipped": m.counts.dropped_kept}
    result["records"] = clean_records(meta, store, opts)
    return result


def format_summary(result: dict) -> str:
    m = result["mark"]
    dry = result.get("dry_run")
    u = m.get("unrecognised") or {"files": 0, "bytes": 0, "sample": []}
    lines = [f"gc run {m['run_id']}{' (dry run)' if dry else ''}: listed {m['listed']} objects "
             f"({m.get('referenced', 0)} referenced), {m['candidates']} candidates ({m['candidate_bytes']} bytes)"
             f"{' that a real run deletes' if dry else ''}, kept {m['kept']}",
             f"unrecognised (never deleted): {u['files']} files, {u['bytes']} bytes"
             + (f", e.g. {', '.join(u['sample'][:5])}" if u["sample"] else "")]
    ud = m.get("unreadable_directories") or {}
    if ud.get("files"):
        lines.append(f"directories that could not be read (their content not judged): {ud['files']}, "
                     f"e.g. {', '.join(ud['sample'][:5])}")
    us = m.get("unknown_segment") or {}
    if us.get("files"):
        lines.append(f"index files of unknown segments (not judged by a scoped run): {us['files']} files, "
                     f"{us['bytes']} bytes, e.g. {', '.join(us['sample'][:5])}")
    for k, v in sorted(m["by_collection_reason"].items()):
        coll, reason = k.split("/")
        lines.append(f"  collection {coll if coll != '-1' else '?'}: {reason}: {v['files']} files, {v['bytes']} bytes")
    d = result.get("dropped") or (result.get("sweep") or {}).get("dropped") or m.get("dropped")
    if d:
        kept = d.get("kept_referenced_or_skipped", (m.get("dropped") or {}).get("kept_referenced_or_skipped", 0))
        lines.append(f"dropped segments: {d['segments']} {'would be ' if dry else ''}reclaimed "
                     f"({d['files']} files, {d['bytes']} bytes), {kept} kept")
    if "sweep" in result:
        s = result["sweep"]
        lines.append(f"swept: {s['deleted']} files, {s['deleted_bytes']} bytes deleted by this run; "
                     f"{s['already_gone']} already gone; {s['rechecked_kept']} kept by the re-check; "
                     f"{s['changed_kept']} changed since the mark (kept); {s['error_count']} errors; "
                     f"{s['dropped']['segments']} dropped segment records removed")
    w = m.get("wal") or {}
    if w.get("error"):
        lines.append(f"wal: not judged (nothing under wal/ deleted): {w['error']}")
    elif w.get("pchannels"):
        lines.append(f"wal: {w['truncatable']} fragments below every checkpoint in {w['pchannels']} pchannels "
                     "(deleted once older than missing_tolerance)")
    if result.get("records"):
        lines.append("records: " + ", ".join(f"{k} {v}" for k, v in sorted(result["records"].items())))
    return "\n".join(lines)
