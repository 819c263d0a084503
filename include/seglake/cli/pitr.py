"""Point-in-time restore: `seglake pitr set|show|clear|list` (a collection's window),
`seglake restore COLLECTION TARGET --as-of TIME` (inline: set up, copy, replay; the
snapshot_restore DAG takes the same `as_of`) and `seglake collections undrop NAME --as NEW
[--from-target [URI]]`."""

from __future__ import annotations

from seglake.config import Settings
from seglake.cli.output import EXIT_FAILED, emit, open_meta_store
from seglake.cli.args import names_arg


def add_pitr_parsers(sub, out, common, coll_t) -> None:
    p = sub.add_parser("pitr", help="point-in-time windows: restore a collection to any instant of the "
                                    "window (off by default)").add_subparsers(dest="action", required=True)
    ps = p.add_parser("set", parents=[common], help="turn a collection's window on (or change it)")
    ps.add_argument("collection", type=coll_t, help="the collection")
    ps.add_argument("window", help="how far back restores reach: 3d, 12h, 90m or seconds (1 minute .. 365 days)")
    ps.set_defaults(fn=cmd_pitr_set)
    for action, helptext in (("show", "a collection's window and what it holds"),
                             ("clear", "turn the window off (the next GC releases what it held)")):
        pa = p.add_parser(action, parents=[common], help=helptext)
        pa.add_argument("collection", type=coll_t, help="the collection")
        pa.set_defaults(fn=cmd_pitr_show if action == "show" else cmd_pitr_clear)
    pl = p.add_parser("list", parents=[out], help="every window and what it holds")
    pl.set_defaults(fn=cmd_pitr_list)
    r = sub.add_parser("restore", parents=[common], help="restore a collection as it was at an instant into a "
                                                         "new collection (inline)")
    r.add_argument("collection", type=coll_t, help="the collection to restore (its window must hold the instant)")
    r.add_argument("target", type=coll_t, help="the new collection")
    r.add_argument("--as-of", required=True, dest="as_of",
                   help="ISO-8601 with a time zone (2026-11-27T12:00:00Z) or a TSO timestamp")
    r.add_argument("--from-target", dest="from_target", nargs="?", const="", default=None, metavar="URI",
                   help="from the backup target alone (a bundle + the WAL archive; default target: config "
                        "backup_uri): the source store and its etcd are not read")
    r.add_argument("--bundle", default=None, help="with --from-target: start from this bundle (default: the "
                                                  "latest one at or before the instant)")
    r.set_defaults(fn=cmd_restore_as_of)


def add_restore_database_parser(sub, common) -> None:
    r = sub.add_parser("restore-database", parents=[common],
                       help="every collection of a database (--db; or --collections) as of ONE instant, into "
                            "new collections NAME+SUFFIX (inline)")
    r.add_argument("--as-of", required=True, dest="as_of",
                   help="ISO-8601 with a time zone (2026-11-27T12:00:00Z) or a TSO timestamp")
    r.add_argument("--suffix", required=True, help="each target is the collection's name + this (e.g. _noon)")
    r.add_argument("--collections", default=None, type=names_arg("collection"),
                   help="comma-separated names (default: every collection)")
    r.add_argument("--from-target", dest="from_target", nargs="?", const="", default=None, metavar="URI",
                   help="from the backup target alone (bundles + the WAL archive)")
    r.set_defaults(fn=cmd_restore_database)


def cmd_restore_database(args, s: Settings) -> int:
    from seglake.lifecycle.pitr.database import drive, restore_database_as_of

    meta, store = open_meta_store(s)
    target = None
    if args.from_target is not None:
        from seglake.lifecycle.backup import bundle as bundles
        target = bundles.open_target(s, args.from_target or None)
    names = args.collections   # None: every collection (an empty value is refused by names_arg)
    jobs = restore_database_as_of(meta, store, args.db, args.as_of, suffix=args.suffix, collections=names,
                                  target=target, owner="cli", engine="inline", timeout=s.copy_job_timeout)
    rows = drive(meta, store, s, jobs, args.db)
    emit(args, rows, rows, ["collection", "target", "state", "rows", "snapshot", "rows_replayed"],
         text=None)
    return EXIT_FAILED if any(r["state"] != "Created" for r in rows) else 0


def add_undrop_parser(colls, common, coll_t) -> None:
    u = colls.add_parser("undrop", parents=[common], help="bring a collection dropped inside its point-in-time "
                                                          "window back, as a new collection, as it was just "
                                                          "before the drop (inline)")
    u.add_argument("name", type=coll_t, help="the dropped collection")
    u.add_argument("--as", dest="new_name", type=coll_t, required=True, help="the new collection")
    u.add_argument("--from-target", dest="from_target", nargs="?", const="", default=None, metavar="URI",
                   help="when this store cannot give it (its record, log or files gone): from the backup target "
                        "alone, its latest bundle + the WAL archive up to the drop (default target: config "
                        "backup_uri)")
    u.add_argument("--bundle", default=None, help="with --from-target: start from this bundle (default: the "
                                                  "latest one of the name with log positions)")
    u.set_defaults(fn=cmd_collections_undrop)


def cmd_pitr_set(args, s: Settings) -> int:
    from seglake.lifecycle import pitr

    meta, _ = open_meta_store(s)
    doc = pitr.set_window(meta, args.collection, args.window, db=args.db)
    emit(args, doc, text=f"point-in-time window of {args.db}.{args.collection}: {doc['window']}")
    return 0


def cmd_pitr_show(args, s: Settings) -> int:
    from seglake.lifecycle import pitr

    meta, _ = open_meta_store(s)
    doc = pitr.get_window(meta, args.collection, db=args.db)
    if doc is None:
        emit(args, {"collection": args.collection, "db": args.db, "window": None},
             text=f"{args.db}.{args.collection}: no point-in-time window (off)")
        return 0
    hold = [h for h in pitr.cost(meta)["windows"] if h["collection_id"] == doc["collection_id"]]
    doc = {**doc, "holds": hold[0] if hold else None}
    emit(args, doc, text=_text(doc))
    return 0


def _text(doc: dict) -> str:
    from seglake.lifecycle.pitr import describe
    from seglake.progress import human_bytes

    h = doc.get("holds")
    gone = "" if doc.get("state", "Created") == "Created" else \
        f" ({doc['state']}: `seglake collections undrop {doc['collection']} --as NEW` while the window holds the drop)"
    if not h:
        return f"{doc['db']}.{doc['collection']}: window {doc['window']}{gone}"
    log = "; log held from " + ", ".join(f"{p} #{n}" for p, n in h["fragments_from"].items())
    head = f"{doc['db']}.{doc['collection']}{gone}: window {doc['window']}"
    if h.get("restorable_from_ts") is None:   # its rows are not all in its log, and no snapshot yet
        return (f"{head}; no instant can be restored yet: its rows are not all in its own log and it has no "
                f"COMMITTED snapshot to start from; take one (`seglake snapshots create {doc['collection']} NAME`): "
                f"instants from then on can be restored" + log)
    return (f"{head}, oldest instant {describe(h['restorable_from_ts'])}"
            + ("" if h["restorable_from_ts"] == h["oldest_instant_ts"] else
               f" (the window reaches {describe(h['oldest_instant_ts'])}, before "
               + (f"snapshot {h['snapshot']!r}, the first a restore can start from)" if h["snapshot"]
                  else "the collection existed)"))
            + "; restores start from "
            + (f"snapshot {h['snapshot']!r} ({human_bytes(h['snapshot_bytes'])})" if h["snapshot"]
               else "the collection's creation")
            + log)


def cmd_pitr_clear(args, s: Settings) -> int:
    from seglake.lifecycle import pitr

    meta, _ = open_meta_store(s)
    was = pitr.clear_window(meta, args.collection, db=args.db)
    emit(args, {"collection": args.collection, "db": args.db, "cleared": was},
         text=f"{args.db}.{args.collection}: " + ("window off; the next GC releases what it held" if was
                                                  else "had no window"))
    return 0


def cmd_pitr_list(args, s: Settings) -> int:
    from seglake.lifecycle import pitr

    meta, _ = open_meta_store(s)
    ws = pitr.list_windows(meta)
    emit(args, ws, ws, ["db", "collection", "window"])
    return 0


def cmd_restore_as_of(args, s: Settings) -> int:
    from seglake.lifecycle import pitr

    meta, store = open_meta_store(s)
    if args.from_target is not None:
        from seglake.lifecycle.backup import bundle as bundles
        from seglake.lifecycle.pitr.from_target import restore_as_of_from_target

        target = bundles.open_target(s, args.from_target or None)
        job_id = restore_as_of_from_target(meta, store, target, args.collection, args.target, args.as_of,
                                           db=args.db, bundle=args.bundle, owner="cli", engine="inline",
                                           timeout=s.copy_job_timeout)
        return _drive(args, s, meta, store, job_id, "as of {as_of} (from " + target.uri + ")")
    if args.bundle is not None:
        from seglake.errors import ValidationError
        raise ValidationError("--bundle goes with --from-target (a restore from the backup target alone)")
    job_id = pitr.restore_as_of(meta, store, args.collection, args.target, args.as_of, db=args.db, owner="cli",
                                engine="inline", timeout=s.copy_job_timeout)
    return _drive(args, s, meta, store, job_id, "as of {as_of}")


def cmd_collections_undrop(args, s: Settings) -> int:
    from seglake.lifecycle import pitr

    meta, store = open_meta_store(s)
    backup = None
    if args.from_target is not None:
        from seglake.lifecycle.backup import bundle as bundles
        backup = bundles.open_target(s, args.from_target or None)
    elif args.bundle is not None:
        from seglake.errors import ValidationError
        raise ValidationError("--bundle goes with --from-target (an undrop from the backup target)")
    job_id = pitr.undrop(meta, store, args.name, args.new_name, db=args.db, owner="cli", engine="inline",
                         timeout=s.copy_job_timeout, backup=backup, bundle=args.bundle)
    args.collection, args.target = args.name, args.new_name
    return _drive(args, s, meta, store, job_id, "as it was just before its drop")


def _drive(args, s: Settings, meta, store, job_id: int, what: str) -> int:
    """The copy job inline, then the replay; the summary."""
    from seglake.lifecycle import copyjob, pitr
    from seglake.meta.copyjobs import JOB_COMPLETED

    copyjob.plan(meta, job_id, s.max_segments_per_task)
    copyjob.run_inline(meta, store, job_id, threads=s.copy_threads, settings=s)
    job = copyjob.finalize(meta, job_id, settings=s)
    if job.state != JOB_COMPLETED:
        emit(args, {"job_id": job_id, "state": job.state, "reason": job.reason},
             text=f"copy job {job_id} {job.state}: {job.reason}")
        return EXIT_FAILED
    out = pitr.replay(meta, store, s, job.target_collection_id)
    from seglake.lifecycle import verify
    report = verify.verify_collection(meta, store, args.target, args.db, threads=s.copy_threads)
    out["verified"] = report["ok"]
    if not report["ok"]:
        emit(args, {**out, "verify": report}, text=verify.format_report(report))
        return EXIT_FAILED
    emit(args, out, text=(f"restored {args.db}.{args.collection} {what.format(as_of=out['as_of_utc'])} into "
                          f"{args.target!r} "
                          f"from {('snapshot ' + repr(out['snapshot'])) if out['snapshot'] else 'its creation'}: "
                          f"{out['messages']} log messages ({out['log_bytes']} bytes of log), "
                          f"{out['rows_replayed']} rows and {out['deletes_replayed']} deletes replayed; "
                          f"verified ({report['files_checked']} files, {report['visible_rows']} visible rows)"))
    return 0
