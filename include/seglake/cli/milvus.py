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
    meta = None
    if bps or rps:   # the throttle's clock lives in seglake's etcd
        from seglake.meta import Meta
        meta = Meta.from_settings(s)
    reports = capture.run_request(req, s, bundles.open_target(s, args.target), meta=meta, max_bytes_per_second=bps,
                                  max_requests_per_second=rps, say=_say)
    emit(args, reports, text="\n".join(
        f"bundle {r['db']}.{r['collection']}/{r['bundle']}: "
        + ("already captured, nothing copied" if r["already"] else
           f"committed: {r['segments']} Flushed segments, {r['rows']} rows, {r['files']} files "
           f"({human_bytes(r['bytes'])}), {r['copied_files']} copied ({human_bytes(r['copied_bytes'])}), "
           f"the rest already in the target (content checked)") for r in reports))
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
    mb.add_argument("--max-requests-per-second", type=number_arg("copy_max_requests_per_second"), default=0)
    mb.set_defaults(fn=cmd_backup)
    add_restore_parser(m, common, coll_t, snap_t, number_arg)
