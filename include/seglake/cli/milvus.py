"""`seglake milvus ...`: a real Milvus server. `backup` captures Milvus collections into
bundles of a backup target (seglake.milvus.capture): Milvus is only read, its etcd (range
reads at one revision) and its bucket (GET/LIST); the bucket's S3 credentials are the
milvus_s3_* config keys (environment or SEGLAKE_CONFIG), the target's the backup_s3_* keys:
never an argument. `restore` (cli/milvus_restore.py) restores a capture into a Milvus."""

from __future__ import annotations

import sys

from seglake.config import Settings
from seglake.progress import human_bytes


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cmd_backup(args, s: Settings) -> int:
    from seglake.cli.output import emit
    from seglake.lifecycle.backup import bundle as bundles
    from seglake.milvus import capture

    req = capture.check_request(args.milvus_etcd, args.milvus_root, args.bucket, args.bucket_root,
                                args.collections, args.bundle, db=args.db, all_collections=args.all)
    bps = (args.max_mib_per_second or 0) * (1 << 20)
    rps = args.max_requests_per_second or 0
    from seglake.meta import Meta

    # seglake's etcd, always: the throttle's clock and the store-wide limit shared by all copy
    # work live there, and so does the capture's record (the page's Milvus section)
    with Meta.from_settings(s) as meta:
        reports = capture.run_request(req, s, bundles.open_target(s, args.target), meta=meta,
                                      max_bytes_per_second=bps, max_requests_per_second=rps, say=_say)
    emit(args, reports, text="\n".join(
        f"bundle {r['db']}.{r['collection']}/{r['bundle']}: "
        + ("already captured, nothing copied" if r["already"] else
           f"committed: {r['segments']} Flushed segments, {r['rows']} rows, {r['files']} files "
           f"({human_bytes(r['bytes'])}), {r['copied_files']} copied ({human_bytes(r['copied_bytes'])}), "
           f"the rest already in the target (content checked)") for r in reports))
    return 0


def cmd_source_set(args, s: Settings) -> int:
    from seglake.cli.output import emit
    from seglake.meta import Meta
    from seglake.milvus import sources

    given = {k: getattr(args, k) for k in sources.KEYS if getattr(args, k, None) is not None}
    with Meta.from_settings(s) as meta:
        d = sources.set_source(meta, args.name, given)
    emit(args, d, text=f"Milvus source {args.name!r}: {', '.join(d['collections'])} of {d['db']} at "
                       f"{d['milvus_etcd']}; {_keep(d)}")
    return 0


def _keep(d: dict) -> str:
    from seglake.lifecycle.retention import KEYS
    return "keep " + ", ".join(f"{k.removeprefix('keep_')} {d[k]}" for k in KEYS if d.get(k))


def cmd_source_show(args, s: Settings) -> int:
    from seglake.cli.output import emit
    from seglake.meta import Meta
    from seglake.milvus import sources

    with Meta.from_settings(s) as meta:
        d = sources.get_source(meta, args.name)
    emit(args, d, text="\n".join(f"{k}: {v}" for k, v in d.items()))
    return 0


def cmd_source_list(args, s: Settings) -> int:
    from seglake.cli.output import emit
    from seglake.meta import Meta
    from seglake.milvus import sources

    with Meta.from_settings(s) as meta:
        rows = sources.list_sources(meta)
    emit(args, rows, rows=[{"name": d.get("name"), "etcd": d.get("milvus_etcd"), "db": d.get("db"),
                            "collections": ",".join(d.get("collections") or []), "policy": _keep(d)} for d in rows],
         columns=["name", "etcd", "db", "collections", "policy"])
    return 0


def cmd_source_clear(args, s: Settings) -> int:
    from seglake.cli.output import emit
    from seglake.meta import Meta
    from seglake.milvus import sources

    with Meta.from_settings(s) as meta:
        gone = sources.clear_source(meta, args.name)
    emit(args, {"cleared": gone}, text=f"Milvus source {args.name!r} " + ("removed" if gone else "was not registered"))
    return 0


def cmd_source_run(args, s: Settings) -> int:
    """One schedule run of the sources now, inline (the snapshot_schedule DAG runs them on its
    schedule); the bucket's credentials: the milvus_s3_* config keys."""
    import time

    from seglake.cli.output import emit
    from seglake.lifecycle.backup import bundle as bundles
    from seglake.meta import Meta
    from seglake.milvus import sources

    with Meta.from_settings(s) as meta:
        reports = sources.run_all(meta, lambda: bundles.open_target(s, args.target), lambda _conn: s, now=time.time(),
                                  dry_run=args.dry_run, source=args.name, say=_say)
    emit(args, reports, text="\n".join(sources.report_line(r) for r in reports))
    return 1 if any("error" in r for r in reports) else 0


def cmd_pin(args, s: Settings) -> int:
    from seglake.cli.output import emit
    from seglake.lifecycle.backup import bundle as bundles
    from seglake.meta import Meta
    from seglake.milvus import sources
    from seglake.progress import utc_time

    with Meta.from_settings(s) as meta:
        if args.unpin:
            gone = sources.unpin(meta, args.db, args.collection, args.bundle)
            emit(args, {"unpinned": gone}, text=f"{args.collection}/{args.bundle} " + ("unpinned" if gone else
                                                                                     "was not pinned"))
        else:
            d = sources.pin(meta, bundles.open_target(s, args.target), args.db, args.collection, args.bundle,
                            args.ttl_hours * 3600.0, by=args.by)
            emit(args, d, text=f"{args.collection}/{args.bundle} pinned until {utc_time(d['expires_at'])}")
    return 0


def add_milvus_parsers(sub, common, coll_t, snap_t, number_arg) -> None:
    from seglake.cli.milvus_restore import add_restore_parser

    m = sub.add_parser("milvus", help="a Milvus server: capture its collections into bundles (read-only on "
                                      "Milvus), restore a capture into it").add_subparsers(dest="action",
                                                                                            required=True)
    mb = m.add_parser("backup", parents=[common],
                      help="capture Milvus collections (their Flushed segments, at one etcd revision) as bundles "
                           "of the backup target; only files the target lacks are copied")
    mb.add_argument("collections", nargs="*", type=coll_t, metavar="COLLECTION",
                    help="Milvus collections of --db (none: give --all)")
    mb.add_argument("--all", action="store_true", help="every collection of the database")
    mb.add_argument("--milvus-etcd", required=True, help="Milvus's etcd: host:port[,host:port...]")
    mb.add_argument("--milvus-root", default="by-dev", help="Milvus's etcd rootPath (default: by-dev)")
    mb.add_argument("--bucket", required=True,
                    help="Milvus's bucket (S3 credentials: the milvus_s3_* keys), or an absolute local path")
    mb.add_argument("--bucket-root", default="files", help="Milvus's minio.rootPath (default: files)")
    mb.add_argument("--bundle", type=snap_t, required=True, help="the bundle name (one per collection)")
    mb.add_argument("--target", default=None, help="backup target: a local directory or s3://bucket/prefix "
                                                   "(default: config key backup_uri; S3: the backup_s3_* keys)")
    mb.add_argument("--max-mib-per-second", type=number_arg("copy_max_bytes_per_second", 1 << 20), default=0,
                    help="copy at most this many MiB/s (0: unlimited)")
    mb.add_argument("--max-requests-per-second", type=number_arg("copy_max_requests_per_second"), default=0,
                    help="at most this many requests per second (0: unlimited)")
    mb.set_defaults(fn=cmd_backup)
    add_restore_parser(m, common, coll_t, snap_t, number_arg)
    add_source_parsers(m, common, coll_t, snap_t, number_arg)


def add_source_parsers(m, common, coll_t, snap_t, number_arg) -> None:
    import argparse

    src = m.add_parser("source", help="registered Milvus sources: their collections captured on the "
                                      "snapshot_schedule DAG's schedule, pruned by a retention policy, verified"
                       ).add_subparsers(dest="source_action", required=True)
    ss = src.add_parser("set", parents=[common], help="register (or replace) a Milvus source; no secret: the "
                                                      "bucket's credentials come from the Airflow connection "
                                                      "--conn-id (DAG) or the milvus_s3_* keys (CLI)")
    ss.add_argument("name", type=snap_t, help="the source's name")
    ss.add_argument("--milvus-etcd", required=True, help="Milvus's etcd: host:port[,host:port...]")
    ss.add_argument("--milvus-root", default=None, help="Milvus's etcd rootPath (default: by-dev)")
    ss.add_argument("--bucket", required=True, help="Milvus's bucket, or an absolute local path")
    ss.add_argument("--bucket-root", default=None, help="Milvus's minio.rootPath (default: files)")
    ss.add_argument("--collections", required=True, help="comma-separated Milvus collections of --db")
    ss.add_argument("--conn-id", default=None, help="the Airflow connection of the bucket's credentials "
                                                    "(default: seglake_milvus)")
    ss.add_argument("--max-mib-per-second", type=number_arg("copy_max_bytes_per_second", 1 << 20), default=None,
                    help="throttle each scheduled capture (0: unlimited; the store-wide limit applies too)")
    ss.add_argument("--verify", action=argparse.BooleanOptionalAction, default=None,
                    help="verify each new capture (default: yes)")
    from seglake.cli.parser import KEEP_HELP
    for unit in ("last", "hourly", "daily", "weekly", "monthly"):
        ss.add_argument(f"--keep-{unit}", dest=f"keep_{unit}", type=number_arg("retention_keep"), default=None,
                        help=KEEP_HELP[unit])
    ss.set_defaults(fn=cmd_source_set)
    for action, fn, what in (("show", cmd_source_show, "a source's record"),
                             ("clear", cmd_source_clear, "forget a source (its bundles stay)")):
        p = src.add_parser(action, parents=[common], help=what)
        p.add_argument("name", type=snap_t, help="the source")
        p.set_defaults(fn=fn)
    sl = src.add_parser("list", parents=[common], help="every registered source")
    sl.set_defaults(fn=cmd_source_list)
    sr = src.add_parser("run", parents=[common], help="one schedule run now, inline (capture what is due, "
                                                      "verify, prune)")
    sr.add_argument("name", nargs="?", type=snap_t, default=None, help="only this source")
    sr.add_argument("--dry-run", action="store_true", help="list what would be captured and pruned; change nothing")
    sr.add_argument("--target", default=None, help="backup target (default: config key backup_uri)")
    sr.set_defaults(fn=cmd_source_run)
    mp = m.add_parser("pin", parents=[common], help="keep a capture bundle from being pruned for a while")
    mp.add_argument("collection", type=coll_t, help="the Milvus collection")
    mp.add_argument("bundle", type=snap_t, help="the capture bundle")
    mp.add_argument("--ttl-hours", type=number_arg("pin_ttl", 3600.0), default=24.0,
                    help="how long the pin holds (hours; default 24)")
    mp.add_argument("--by", default="cli", help="who or what pinned it (default cli)")
    mp.add_argument("--unpin", action="store_true", help="remove the pin instead")
    mp.add_argument("--target", default=None, help="the backup target holding the bundle (default: config key "
                                                   "backup_uri)")
    mp.set_defaults(fn=cmd_pin)
