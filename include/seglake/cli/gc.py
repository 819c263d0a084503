"""GC commands: report, run, pause/resume, the scheduled-run settings."""

from __future__ import annotations

import re

from seglake.config import Settings
from seglake.progress import utc_time
from seglake.errors import ValidationError
from seglake.cli.output import emit, open_meta_store, table
from seglake.progress import human_bytes


def cmd_gc_report(args, s: Settings) -> int:
    from seglake.lifecycle import gc

    _, store = open_meta_store(s)
    doc = gc.latest_summary(store)
    if args.json:
        emit(args, doc)
        return 0
    swept = doc.get("swept")
    print(f"gc run {doc['run_id']}{' (dry run)' if doc.get('dry_run') else ''}: listed {doc['listed']}, "
          f"{doc['candidates']} candidates, {human_bytes(doc['candidate_bytes'])}; kept {doc['kept']}")
    u = doc.get("unrecognised") or {"files": 0, "bytes": 0, "sample": []}
    print(f"unrecognised (never deleted): {u['files']} files, {human_bytes(u['bytes'])}"
          + (f", e.g. {', '.join(u['sample'][:5])}" if u["sample"] else ""))
    print(("deleted (the sweep STOPPED part-way: run gc again): " if swept and swept.get("partial") else "deleted: ")
          + (f"{swept['deleted']} files, {human_bytes(swept['deleted_bytes'])}, "
                         f"{swept.get('already_gone', 0)} already gone, "
                         f"{swept['rechecked_kept']} kept by the re-check, "
                         f"{swept.get('changed_kept', 0)} changed since the mark, {_error_count(swept)} errors"
                         if swept else "nothing (mark only)"))
    rows = []
    for k, v in sorted(doc["by_collection_reason"].items()):
        coll, reason = k.split("/")
        rows.append({"collection": coll if coll != "-1" else "?", "reason": reason, "files": v["files"],
                     "size": human_bytes(v["bytes"])})
    print(table(rows, ["collection", "reason", "files", "size"]))
    return 0


def _error_count(swept: dict) -> int:
    """How many deletes failed: the run's count, never the length of its sample list
    (`errors` holds the first SweepResult.MAX_ERRORS only)."""
    return swept["error_count"] if "error_count" in swept else len(swept["errors"])


def cmd_gc_run(args, s: Settings) -> int:
    """A whole GC inline. Dry run unless --execute: the report is what a real run deletes."""
    from seglake.lifecycle import gc

    meta, store = open_meta_store(s)
    cid = meta.catalog.get_by_name(args.collection, args.db).collection_id if args.collection else None
    hours = {k: None if getattr(args, f"{k}_hours") is None else getattr(args, f"{k}_hours") * 3600
             for k in ("missing_tolerance", "drop_tolerance")}
    opts = gc.GCOptions.from_settings(s, force=args.force, dry_run=not args.execute, collection_id=cid, **hours)
    result = gc.run(meta, store, opts)
    emit(args, result, text=gc.format_summary(result) + ("" if args.execute else
                                                         "\ndry run: nothing deleted; pass --execute to delete"))
    return 0


def cmd_gc_pause(args, s: Settings) -> int:
    from seglake.lifecycle import gc

    meta, _ = open_meta_store(s)
    cid = meta.catalog.get_by_name(args.collection, args.db).collection_id if args.collection else None
    if args.action == "pause":
        gc.pause(meta, cid, ttl=args.ttl_hours * 3600, reason=args.reason)
        print(f"gc paused for {args.collection or 'all collections'} for {args.ttl_hours:g} h")
        return 0
    gc.resume(meta, cid)
    print(f"gc resumed for {args.collection or 'all collections'}")
    return 0


def cmd_gc_schedule(args, s: Settings) -> int:
    """The settings scheduled gc runs use (an etcd record): a scheduled run is refused
    until they are set, and never falls back to the form's defaults."""
    import getpass

    from seglake.lifecycle import gc

    meta, _ = open_meta_store(s)
    if args.schedule_action == "set":
        conf = {"dry_run": not args.execute, "collection": args.collection, "db": args.db,
                "missing_tolerance_hours": args.missing_tolerance_hours,
                "drop_tolerance_hours": args.drop_tolerance_hours, "force": args.force, "engine": args.engine}
        try:
            user = getpass.getuser()
        except Exception:  # noqa: BLE001 - no user name in a container: record none
            user = ""
        try:
            rec = gc.set_schedule(meta, conf, s.tolerance_floor, by=user)
        except ValidationError as e:   # the conf's words in the CLI's: --flags, not conf keys
            text = re.sub(r"conf key '([a-z_]+)'", lambda m: "--" + m.group(1).replace("_", "-"), str(e))
            raise ValidationError(text.replace("gc: refused conf before any change: ", "")
                                  .replace("set force to true", "pass --force")) from None
        emit(args, rec, text="scheduled gc runs will use: " + _schedule_text(rec))
        return 0
    if args.schedule_action == "clear":
        had = gc.clear_schedule(meta)
        print("scheduled gc settings removed: scheduled runs are refused until they are set again"
              if had else "no scheduled gc settings were set")
        return 0
    rec = gc.get_schedule(meta)
    emit(args, rec, text=("scheduled gc runs use: " + _schedule_text(rec)) if rec else
         "no scheduled gc settings: a scheduled gc run is refused (set them with `seglake gc schedule set`)")
    return 0


def _schedule_text(rec: dict) -> str:
    c = rec["conf"]
    tol = ", ".join(f"{k.replace('_hours', '')} {c[k]:g} h" for k in ("missing_tolerance_hours",
                                                                     "drop_tolerance_hours") if c[k] is not None)
    when = utc_time(rec["set_at"])
    return (f"{'a DRY RUN (nothing deleted)' if c['dry_run'] else 'a REAL run (deletes)'}, "
            f"{'collection ' + c['db'] + '.' + c['collection'] if c['collection'] else 'whole store'}, "
            f"engine {c['engine']}" + (f", {tol}" if tol else ", tolerances from config")
            + (", force" if c["force"] else "") + f" (set {when}" + (f" by {rec['set_by']}" if rec.get("set_by") else "")
            + ")")
