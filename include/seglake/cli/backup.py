"""`seglake backup ...`: export snapshots to a backup target as bundles, list, verify,
prune, import and restore them (seglake.lifecycle.backup). The target is `--target` or the
config key backup_uri; its S3 credentials are the backup_s3_* keys (environment or
SEGLAKE_CONFIG), never a command-line argument."""

from __future__ import annotations

import sys

from seglake.config import Settings
from seglake.progress import human_bytes, utc_time


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _target(args, s: Settings):
    from seglake.lifecycle.backup import bundle as bundles
    return bundles.open_target(s, args.target)


def _rates(args) -> dict:
    return {"max_bytes_per_second": (args.max_mib_per_second or 0) * (1 << 20),
            "max_requests_per_second": args.max_requests_per_second or 0}


def cmd_export(args, s: Settings) -> int:
    from seglake.cli.output import emit, open_meta_store
    from seglake.lifecycle.backup import export

    meta, store = open_meta_store(s)
    r = export.export(meta, store, _target(args, s), args.collection, args.snapshot, bundle=args.bundle,
                      db=args.db, threads=s.copy_threads, by="cli", say=_say, **_rates(args))
    emit(args, r, text=(f"bundle {args.db}.{args.collection}/{r['bundle']}: already exported, nothing copied"
                        if r["already"] else
                        f"bundle {args.db}.{args.collection}/{r['bundle']} committed: {r['files']} files "
                        f"({human_bytes(r['bytes'])}), {r['copied_files']} copied ({human_bytes(r['copied_bytes'])}), "
                        f"{r['reused_files'] + r['deduplicated_files']} already in the target (content checked)"
                        + (f", {r['repaired_files']} damaged data files in the target copied again"
                           if r.get("repaired_files") else "")))
    return 0


def cmd_list(args, s: Settings) -> int:
    from seglake.cli import emit
    from seglake.lifecycle.backup import bundle as bundles

    items = bundles.list_bundles(_target(args, s), args.db if args.collection else None, args.collection)
    emit(args, items, [{"collection": f"{d['db']}.{d['collection']}", "bundle": d["bundle"], "state": d["state"],
                        "snapshot": d.get("snapshot"), "rows": d.get("rows"), "files": d.get("files"),
                        "size": human_bytes(d["bytes"]) if "bytes" in d else None,
                        "created": utc_time(d.get("created_at"))} for d in items],
         ["collection", "bundle", "state", "snapshot", "rows", "files", "size", "created"])
    return 0


def cmd_show(args, s: Settings) -> int:
    from seglake.cli import emit
    from seglake.lifecycle.backup import bundle as bundles

    doc = bundles.read(_target(args, s), args.db, args.collection, args.bundle)
    d = bundles.summary(doc)
    emit(args, {**d, "segments": doc["totals"]["segments"]},
         text=f"bundle {args.db}.{args.collection}/{args.bundle} (uid {d['uid']}): snapshot {d['snapshot']!r}, "
              f"{d['segments']} segments, {d['rows']} rows, {d['files']} files ({human_bytes(d['bytes'])}, "
              f"{d['unique_blobs']} distinct contents), created {utc_time(d['created_at'])}")
    return 0


def cmd_verify(args, s: Settings) -> int:
    from seglake.cli.output import EXIT_FAILED, emit, open_meta_store
    from seglake.lifecycle.backup import verify

    meta, _ = open_meta_store(s)
    r = verify.verify(_target(args, s), args.collection, args.bundle, db=args.db, threads=s.copy_threads,
                      meta=meta, say=_say)
    lines = [f"bundle {args.db}.{args.collection}/{args.bundle}: "
             + (f"OK, {r['data_files']} data files ({human_bytes(r['bytes'])}) read and checked" if r["ok"] else
                f"{r.get('problem_count', len(r['problems']))} BAD")]
    lines += [f"  {p['file']}: {p['problem']}" for p in r["problems"][:50]]
    emit(args, r, text="\n".join(lines))
    return 0 if r["ok"] else EXIT_FAILED


def cmd_import(args, s: Settings) -> int:
    from seglake.cli.output import emit, open_meta_store
    from seglake.lifecycle.backup import imports

    meta, store = open_meta_store(s)
    r = imports.import_bundle(meta, store, _target(args, s), args.collection, args.bundle, db=args.db,
                              as_collection=args.as_collection, snapshot=args.as_snapshot,
                              threads=s.copy_threads, say=_say, **_rates(args))
    emit(args, r, text=f"imported as snapshot {r['snapshot']!r} of {r['db']}.{r['collection']} (collection id "
                       f"{r['collection_id']}): {r['segments']} segments, {r['rows']} rows; restore it with "
                       f"the snapshot_restore DAG")
    return 0


def cmd_restore(args, s: Settings) -> int:
    from seglake.cli.output import EXIT_FAILED, emit, open_meta_store
    from seglake.lifecycle import copyjob
    from seglake.lifecycle.backup import bundle_restore
    from seglake.meta.copyjobs import JOB_COMPLETED

    meta, store = open_meta_store(s)
    r = bundle_restore.restore_from_bundle(meta, store, _target(args, s), args.collection, args.bundle,
                                           args.restore_to, db=args.db, engine="inline", owner="cli",
                                           timeout=s.copy_job_timeout, say=_say,
                                           **_rates(args))
    copyjob.plan(meta, r["job_id"], s.max_segments_per_task)
    copyjob.run_inline(meta, store, r["job_id"], threads=s.copy_threads, settings=s)
    job = copyjob.finalize(meta, r["job_id"], settings=s)
    emit(args, {**r, "state": job.state}, text=f"restored bundle {args.db}.{args.collection}/{args.bundle} into "
                                               f"{args.restore_to!r}: copy job {job.job_id} {job.state}")
    return 0 if job.state == JOB_COMPLETED else EXIT_FAILED


def cmd_prune(args, s: Settings) -> int:
    from seglake.cli import emit
    from seglake.cli.output import open_meta_store
    from seglake.lifecycle.backup import prune
    from seglake.lifecycle.retention import KEYS

    policy = {k: getattr(args, k) for k in KEYS if getattr(args, k)}
    target = _target(args, s)
    meta, _ = open_meta_store(s)   # the pins and windows that hold bundles live in etcd
    from seglake.lifecycle.backup.archive import site_id

    r = prune.prune(target, args.collection, policy, db=args.db, dry_run=args.dry_run,
                    min_age=args.min_age_hours * 3600, pinned=prune.held_in(meta, target, args.db, args.collection),
                    site=None if args.all_sites else site_id(meta), say=_say)
    sw = r.get("sweep") or {}
    emit(args, r, text=f"{'would drop' if args.dry_run else 'dropped'} {len(r['pruned'])} bundles "
                       f"({', '.join(r['pruned']) or 'none'}), kept {len(r['kept'])}; data files: "
                       f"{sw.get('candidates', 0)} unreferenced, {sw.get('deleted', 0)} deleted")
    return 0


def add_backup_parsers(sub, snaps, common, coll_t, snap_t, number_arg) -> None:
    b = sub.add_parser("backup", help="backups in another store: export, list, verify, import, restore").add_subparsers(
        dest="action", required=True)
    tgt = dict(default=None, help="backup target: a local directory or s3://bucket/prefix (default: config key "
                                  "backup_uri; S3 credentials: the backup_s3_* keys)")

    def rates(p) -> None:
        p.add_argument("--max-mib-per-second", type=number_arg("copy_max_bytes_per_second", 1 << 20), default=0,
                       help="copy at most this many MiB/s (0: unlimited)")
        p.add_argument("--max-requests-per-second", type=number_arg("copy_max_requests_per_second"), default=0,
                       help="at most this many copy requests per second (0: unlimited)")

    for group in (b, snaps):   # `seglake backup export` = `seglake snapshots export`
        be = group.add_parser("export", parents=[common], help="copy a COMMITTED snapshot to the backup target as "
                                                               "a bundle (only files the target lacks are copied)")
        be.add_argument("collection", type=coll_t, help="the snapshot's collection")
        be.add_argument("snapshot", type=snap_t, help="the COMMITTED snapshot to export")
        be.add_argument("--bundle", type=snap_t, default=None, help="bundle name (default: the snapshot's)")
        be.add_argument("--target", **tgt)
        rates(be)
        be.set_defaults(fn=cmd_export)
    bl = b.add_parser("list", parents=[common], help="the bundles in the target")
    bl.add_argument("--collection", type=coll_t, default=None, help="only this collection's bundles")
    bl.add_argument("--target", **tgt)
    bl.set_defaults(fn=cmd_list)
    for name, fn, hlp in (("show", cmd_show, "one bundle's summary"),
                          ("verify", cmd_verify, "read every file of a bundle and check it (exit 1 when bad)")):
        p = b.add_parser(name, parents=[common], help=hlp)
        p.add_argument("collection", type=coll_t, help="the bundle's collection")
        p.add_argument("bundle", type=snap_t, help="the bundle")
        p.add_argument("--target", **tgt)
        p.set_defaults(fn=fn)
    bi = b.add_parser("import", parents=[common], help="import a bundle as a COMMITTED snapshot of this store")
    bi.add_argument("collection", type=coll_t, help="the bundle's collection")
    bi.add_argument("bundle", type=snap_t, help="the bundle")
    bi.add_argument("--as-collection", type=coll_t, default=None, help="the collection name it is filed under")
    bi.add_argument("--as-snapshot", type=snap_t, default=None, help="the snapshot name (default: the bundle's)")
    bi.add_argument("--target", **tgt)
    rates(bi)
    bi.set_defaults(fn=cmd_import)
    bp = b.add_parser("prune", parents=[common], help="drop a collection's bundles a retention policy does not keep "
                                                      "(never the newest), then the data files no bundle lists")
    bp.add_argument("collection", type=coll_t, help="the collection whose bundles are pruned")
    from seglake.cli.parser import KEEP_HELP
    for k in ("last", "hourly", "daily", "weekly", "monthly"):
        bp.add_argument(f"--keep-{k}", dest=f"keep_{k}", type=number_arg("retention_keep"), default=0,
                        help=KEEP_HELP[k])
    bp.add_argument("--min-age-hours", type=number_arg("bundle_min_age", 3600), default=24,
                    help="data files younger than this are kept (at least 1; default 24)")
    bp.add_argument("--dry-run", action="store_true", help="list what would go; change nothing")
    bp.add_argument("--all-sites", action="store_true",
                    help="judge every site's bundles of the collection (default: only this etcd root's, and "
                         "bundles that name no site; other sites sharing the target prune their own)")
    bp.add_argument("--target", **tgt)
    bp.set_defaults(fn=cmd_prune)
    br = b.add_parser("restore", parents=[common], help="restore a bundle into a new collection, each byte copied "
                                                        "once straight from the target (inline; the "
                                                        "snapshot_restore_external DAG runs it on Airflow)")
    br.add_argument("collection", type=coll_t, help="the bundle's collection")
    br.add_argument("bundle", type=snap_t, help="the bundle")
    br.add_argument("restore_to", type=coll_t, help="the new collection")
    br.add_argument("--target", **tgt)
    rates(br)
    br.set_defaults(fn=cmd_restore)
