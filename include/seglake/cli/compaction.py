"""`seglake compact [--dry-run] COLLECTION`: plan (and run, inline) a collection's
compaction; the plan's units with their expected gain, then what each unit did.
`seglake compaction policy set|show|clear|list`: the per-collection policy (etcd);
`seglake compaction scheduled [--dry-run]`: the scheduled run, now, inline;
`seglake compaction history [COLLECTION]`: the last runs."""

from __future__ import annotations

import argparse

from seglake.config import Settings
from seglake.cli.output import EXIT_FAILED, emit, open_meta_store, table
from seglake.progress import human_bytes


def add_compaction_parsers(sub, common, coll_t, number_arg) -> None:
    c = sub.add_parser("compact", parents=[common],
                       help="compact a collection inline: merge small segments, drop deleted rows "
                            "(a dry run shows the units and their expected gain)")
    c.add_argument("collection", type=coll_t, help="the collection")
    c.add_argument("--dry-run", action="store_true", help="plan only: show the units, change nothing")
    c.add_argument("--min-segment-rows", type=number_arg("compaction_min_segment_rows"), default=None,
                   help="merge segments below this many rows (default: config compaction_min_segment_rows)")
    c.add_argument("--target-rows", type=number_arg("compaction_target_rows"), default=None,
                   help="merged segments hold about this many rows (default: config compaction_target_rows)")
    c.add_argument("--delete-ratio", type=number_arg("compaction_delete_ratio"), default=None,
                   help="rewrite a segment alone above this deleted fraction (default: config)")
    c.add_argument("--protection-seconds", type=number_arg("compaction_protection"), default=None,
                   help="skip a collection snapshotted within this long (default: config compaction_protection)")
    _byte_flags(c, number_arg)
    c.set_defaults(fn=cmd_compact)

    cp = sub.add_parser("compaction", help="compaction policies, the scheduled run, history").add_subparsers(
        dest="action", required=True)
    pol = cp.add_parser("policy", help="a collection's compaction policy (overrides config; empty keys: config)"
                        ).add_subparsers(dest="policy_action", required=True)
    ps = pol.add_parser("set", parents=[common], help="record the policy (replaces the previous one)")
    ps.add_argument("collection", type=coll_t, help="the collection")
    ps.add_argument("--min-segment-rows", type=number_arg("compaction_min_segment_rows"), default=None,
                    help="merge segments below this many rows (unset: config compaction_min_segment_rows)")
    ps.add_argument("--target-rows", type=number_arg("compaction_target_rows"), default=None,
                    help="merged segments hold about this many rows (unset: config compaction_target_rows)")
    ps.add_argument("--delete-ratio", type=number_arg("compaction_delete_ratio"), default=None,
                    help="rewrite a segment alone above this deleted fraction (unset: config)")
    ps.add_argument("--protection-seconds", type=number_arg("compaction_protection"), default=None,
                    help="skip the collection when snapshotted within this long (unset: config)")
    _byte_flags(ps, number_arg)
    ps.add_argument("--scheduled", action=argparse.BooleanOptionalAction, default=None,
                    help="scheduled runs of the compaction DAG compact this collection")
    ps.set_defaults(fn=cmd_compaction_policy)
    for action, text in (("show", "a collection's stored policy"), ("clear", "remove a collection's policy")):
        pa = pol.add_parser(action, parents=[common], help=text)
        pa.add_argument("collection", type=coll_t, help="the collection")
        pa.set_defaults(fn=cmd_compaction_policy)
    pol.add_parser("list", parents=[common], help="every stored policy").set_defaults(fn=cmd_compaction_policy)
    sc = cp.add_parser("scheduled", parents=[common], help="the scheduled run now, inline: every collection whose "
                                                          "policy says scheduled")
    sc.add_argument("--dry-run", action="store_true", help="plan only: show the units, change nothing")
    sc.set_defaults(fn=cmd_compaction_scheduled)
    h = cp.add_parser("history", parents=[common], help="the last compaction runs")
    h.add_argument("collection", type=coll_t, nargs="?", default=None, help="only this collection (default: all)")
    h.add_argument("--last", type=number_arg("compaction_history"), default=20,
                   help="the newest N runs (default 20)")
    h.set_defaults(fn=cmd_compaction_history)


def _byte_flags(p, number_arg) -> None:
    p.add_argument("--min-segment-bytes", type=number_arg("compaction_min_segment_bytes"), default=None,
                   help="merge segments below this many stored bytes too (default: config)")
    p.add_argument("--target-bytes", type=number_arg("compaction_target_bytes"), default=None,
                   help="merged segments hold about this many bytes (default: config)")
    p.add_argument("--l0-age-seconds", type=number_arg("compaction_l0_age"), default=None,
                   help="fold L0 delete segments older than this into the segments they hit (default: config)")


def _overrides(args) -> dict:
    return {"min_segment_rows": args.min_segment_rows, "target_rows": args.target_rows,
            "delete_ratio": args.delete_ratio, "protection": args.protection_seconds,
            "min_segment_bytes": args.min_segment_bytes, "target_bytes": args.target_bytes,
            "l0_age": args.l0_age_seconds}


def _policy_text(d: dict) -> str:
    keys = ", ".join(f"{k}={v}" for k, v in sorted(d["policy"].items())) or "config"
    return f"{keys}; scheduled: {'yes' if d['scheduled'] else 'no'}"


def cmd_compaction_policy(args, s: Settings) -> int:
    import getpass

    from seglake.errors import NotFound
    from seglake.lifecycle import compaction

    meta, _ = open_meta_store(s)
    act = args.policy_action
    if act == "set":
        given = {k: v for k, v in _overrides(args).items() if v is not None}
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = ""
        d = compaction.set_policy(meta, s, args.collection, given, db=args.db, scheduled=args.scheduled,
                                  by=f"cli:{user}"[:256])
        emit(args, d, text=f"compaction policy of {args.collection!r}: {_policy_text(d)}")
    elif act == "show":
        d = compaction.get_policy(meta, args.collection, db=args.db)
        if d is None:
            raise NotFound(f"collection {args.collection!r} has no compaction policy (config applies)")
        eff = compaction.effective(s, d["policy"]).to_json()
        emit(args, {**d, "effective": eff}, text=f"compaction policy of {args.collection!r}: {_policy_text(d)}\n"
             "effective: " + ", ".join(f"{k}={v}" for k, v in eff.items()))
    elif act == "clear":
        gone = compaction.clear_policy(meta, args.collection, db=args.db)
        emit(args, {"cleared": gone}, text=f"compaction policy of {args.collection!r} "
             + ("cleared (config applies)" if gone else "was not set"))
    else:
        items = compaction.list_policies(meta)
        emit(args, items, [{"collection": d.get("collection", d.get("key")), "db": d.get("db", ""),
                            "policy": _policy_text(d) if "error" not in d else d["error"]} for d in items],
             ["collection", "db", "policy"])
    return 0


def cmd_compaction_scheduled(args, s: Settings) -> int:
    from seglake.lifecycle import compaction

    meta, store = open_meta_store(s)
    reports = compaction.run_scheduled(meta, store, s, dry_run=args.dry_run)
    emit(args, reports, text="\n".join(map(compaction.report_line, reports))
         or "no collection has a scheduled compaction policy")
    return EXIT_FAILED if any("error" in r or (r.get("counts") or {}).get("lost") for r in reports) else 0


def cmd_compaction_history(args, s: Settings) -> int:
    from seglake.lifecycle import compaction

    meta, _ = open_meta_store(s)
    cid = None if args.collection is None else meta.catalog.get_by_name(args.collection, args.db).collection_id
    runs = compaction.history(meta, cid, last=int(args.last))
    emit(args, runs, [compaction.history_row(r) for r in runs], list(compaction.HISTORY_COLUMNS))
    return 0


def cmd_compact(args, s: Settings) -> int:
    from seglake.lifecycle import compaction

    meta, store = open_meta_store(s)
    policy = compaction.policy_for(meta, s, args.collection, db=args.db, overrides=_overrides(args))
    summary = compaction.compact(meta, store, args.collection, policy, db=args.db, dry_run=args.dry_run)
    if args.json:
        emit(args, summary.to_json())
    else:
        print(_text(summary))
    lost = [r for r in summary.results if r.status == compaction.LOST]
    return EXIT_FAILED if lost else 0


def _text(summary) -> str:
    p, g = summary.plan, summary.plan.gain()
    if p.skipped:   # skipped before its segments were read: no count to give
        return f"collection {p.collection!r} (id {p.collection_id}): not compacted: {p.skipped}"
    head = f"collection {p.collection!r} (id {p.collection_id}): {p.segments} Flushed segments"
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
