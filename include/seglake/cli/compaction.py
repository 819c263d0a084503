"""`seglake compact [--dry-run] COLLECTION`: plan (and run, inline) a collection's
compaction; the plan's units with their expected gain, then what each unit did."""

from __future__ import annotations

from seglake.config import Settings
from seglake.cli.output import EXIT_FAILED, emit, open_meta_store, table
from seglake.progress import human_bytes


def add_compaction_parsers(sub, common, coll_t, number_arg) -> None:
    c = sub.add_parser("compact", parents=[common],
                       help="compact a collection inline: merge small segments, drop deleted rows "
                            "(a dry run shows the units and their expected gain)")
    c.add_argument("collection", type=coll_t)
    c.add_argument("--dry-run", action="store_true", help="plan only: show the units, change nothing")
    c.add_argument("--min-segment-rows", type=number_arg("compaction_min_segment_rows"), default=None,
                   help="merge segments below this many rows (default: config compaction_min_segment_rows)")
    c.add_argument("--target-rows", type=number_arg("compaction_target_rows"), default=None,
                   help="merged segments hold about this many rows (default: config compaction_target_rows)")
    c.add_argument("--delete-ratio", type=number_arg("compaction_delete_ratio"), default=None,
                   help="rewrite a segment alone above this deleted fraction (default: config)")
    c.add_argument("--protection-seconds", type=number_arg("compaction_protection"), default=None,
                   help="skip a collection snapshotted within this long (default: config compaction_protection)")
    c.set_defaults(fn=cmd_compact)


def cmd_compact(args, s: Settings) -> int:
    from seglake.lifecycle import compaction

    policy = compaction.Policy.from_settings(s, {"min_segment_rows": args.min_segment_rows,
                                                 "target_rows": args.target_rows,
                                                 "delete_ratio": args.delete_ratio,
                                                 "protection": args.protection_seconds})
    meta, store = open_meta_store(s)
    summary = compaction.compact(meta, store, args.collection, policy, db=args.db, dry_run=args.dry_run)
    if args.json:
        emit(args, summary.to_json())
    else:
        print(_text(summary))
    lost = [r for r in summary.results if r.status == compaction.LOST]
    return EXIT_FAILED if lost else 0


def _text(summary) -> str:
    p, g = summary.plan, summary.plan.gain()
    head = f"collection {p.collection!r} (id {p.collection_id}): {p.segments} Flushed segments"
    if p.skipped:
        return f"{head}; not compacted: {p.skipped}"
    if not p.units:
        return f"{head}; nothing to compact"
    results = {r.unit_id: r for r in summary.results}
    rows = []
    for u in p.units:
        r = results.get(u.unit_id)
        rows.append({"unit": u.unit_id, "kind": u.kind, "partition": u.partition_id, "inputs": len(u.inputs),
                     "rows": u.rows, "deleted": u.deleted, "delta_logs": u.delta_logs, "size": human_bytes(u.bytes),
                     "status": "planned" if r is None else r.status,
                     "output": "" if r is None or r.output is None else r.output})
    lines = [head, table(rows, ["unit", "kind", "partition", "inputs", "rows", "deleted", "delta_logs", "size",
                                "status", "output"]),
             f"expected gain: {g['segments_in']} segments -> {g['segments_out']}, {g['rows_dropped']} deleted rows "
             f"dropped, {g['delta_logs_in']} delta logs folded, ~{human_bytes(g['bytes_reclaimable_est'])} of "
             f"{human_bytes(g['bytes_in'])} reclaimable after drop_tolerance"]
    if summary.dry_run:
        lines.append("dry run: nothing changed")
    else:
        c = summary.counts()
        lines.append(f"done in {summary.seconds:.1f}s: {c['committed']} committed, {c['already_committed']} already "
                     f"committed, {c['lost']} lost (re-plan: an input changed); {c['segments_in']} segments -> "
                     f"{c['segments_out']}, {c['rows_dropped']} rows dropped, {human_bytes(c['bytes_in'])} -> "
                     f"{human_bytes(c['bytes_out'])}")
        for r in summary.results:
            if r.status == "lost":
                lines.append(f"  unit {r.unit_id} lost: {r.reason}")
    return "\n".join(lines)
