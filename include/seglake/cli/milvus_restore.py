"""`seglake milvus restore`: restore a Milvus capture or a seglake export (a bundle in the
backup target) into a Milvus server under a new name (seglake.milvus.restore). The target Milvus is --address and
its bucket --bucket; the bucket's endpoint, region and keys are the milvus_s3_* config keys
and the Milvus user's password the config key milvus_password (environment SEGLAKE_*,
SEGLAKE_CONFIG or SEGLAKE_SECRETS_FILE), never a command-line argument. Re-running the same
command resumes a killed restore."""

from __future__ import annotations

from seglake.config import Settings


def target_of(args, s: Settings):
    from seglake.errors import ValidationError
    from seglake.milvus.restore import MilvusTarget

    endpoint = args.s3_endpoint or s.milvus_s3_endpoint
    if not endpoint:
        raise ValidationError("the target Milvus's bucket endpoint: pass --s3-endpoint or set config key "
                              "milvus_s3_endpoint")
    return MilvusTarget(address=args.address, bucket=args.bucket, s3_endpoint=endpoint,
                        s3_access_key=s.milvus_s3_access_key, s3_secret_key=s.milvus_s3_secret_key,
                        s3_region=args.s3_region or s.milvus_s3_region, user=args.user or "",
                        password=s.milvus_password, staging=args.staging)


def cmd_restore(args, s: Settings) -> int:
    from seglake.cli.output import emit
    from seglake.lifecycle.backup import bundle as bundles
    from seglake.meta import Meta
    from seglake.milvus import restore

    req = restore.Request(db=args.db, collection=args.collection, bundle=args.bundle, name=args.name,
                          sample=args.sample, import_timeout=args.import_timeout, threads=s.copy_threads)
    target = target_of(args, s)
    meta = Meta.from_settings(s)
    r = restore.run(meta.kv, meta.keys, bundles.open_target(s, args.target), target, req)
    emit(args, r, text=(f"restored {args.db}.{args.collection}/{args.bundle} into Milvus {args.address} as "
                        f"{args.name!r}: {r['segments']} segments, count(*) {r.get('count')} = "
                        f"{r.get('visible_rows')} visible rows of the bundle, {r.get('sampled')} pks compared "
                        f"({r['state']})"))
    return 0


def add_restore_parser(m, common, coll_t, snap_t, number_arg) -> None:
    """`restore` under the `milvus` command group `m` (its subparsers)."""
    r = m.add_parser("restore", parents=[common], help="restore a Milvus capture or a seglake export into a Milvus "
                                                        "server under a new name (resumable: re-run the same command)")
    r.add_argument("collection", type=coll_t, help="the captured or exported collection (the bundle's)")
    r.add_argument("bundle", type=snap_t, help="the bundle (capture or export) in the backup target")
    r.add_argument("name", type=coll_t, help="the new collection's name in the target Milvus")
    r.add_argument("--address", required=True, help="the target Milvus proxy, host:port")
    r.add_argument("--bucket", required=True, help="the target Milvus's bucket (its minio.bucketName)")
    r.add_argument("--s3-endpoint", default=None, help="the bucket's S3 endpoint URL (default: config key "
                                                       "milvus_s3_endpoint; keys: the milvus_s3_* keys)")
    r.add_argument("--s3-region", default=None, help="default: config key milvus_s3_region")
    r.add_argument("--user", default="", help="Milvus user (password: config key milvus_password)")
    r.add_argument("--staging", default="seglake-restore", help="seglake's prefix in the bucket")
    r.add_argument("--sample", type=number_arg("milvus_restore_sample"), default=100,
                   help="pks whose values verify compares")
    r.add_argument("--import-timeout", type=number_arg("milvus_import_timeout"), default=1800.0,
                   help="seconds to wait for the imports (a re-run keeps waiting)")
    r.add_argument("--target", default=None, help="backup target (default: config key backup_uri)")
    r.set_defaults(fn=cmd_restore)
