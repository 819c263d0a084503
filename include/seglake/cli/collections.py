"""Commands on data: demo seed/purge, collections, segments, verify."""

from __future__ import annotations

import sys

from seglake.config import Settings
from seglake.errors import ValidationError
from seglake.cli.output import EXIT_FAILED, emit, fail, open_meta_store, table
from seglake.progress import human_bytes


def cmd_demo_seed(args, s: Settings) -> int:
    from seglake.dev import demo

    params = demo.SeedParams(name=args.name, db=args.db, partitions=args.partitions, segments=args.segments,
                             rows=args.rows, dim=args.dim, shards=args.shards).validate()
    meta, store = open_meta_store(s)
    coll, created = demo.seed(meta, store, params, reset=args.reset)
    segs = list(meta.segments.list(coll.collection_id))
    summary = {"collection": coll.name, "collection_id": coll.collection_id, "created": created,
               "segments": len(segs), "rows": sum(x.num_rows for x in segs),
               "files": sum(x.file_count() for x in segs), "bytes": sum(x.total_size() for x in segs),
               "store": store.uri}
    verb = "created" if created else "reused existing"
    emit(args, summary, text=(f"{verb} collection {coll.name!r} (id {coll.collection_id}): {summary['segments']} "
                              f"segments, {summary['rows']} rows, {summary['files']} files, "
                              f"{human_bytes(summary['bytes'])} in {store.uri}"))
    return 0


def cmd_demo_purge(args, s: Settings) -> int:
    from seglake.dev import demo

    meta, store = open_meta_store(s)
    done = demo.purge(meta, store, args.name, args.db)  # demo data only, no snapshot, no running job
    if done is None:
        print(f"no collection {args.name!r}: nothing to purge")
        return 0
    coll, n = done
    print(f"purged collection {args.name!r} (id {coll.collection_id}): {n} files and its records")
    return 0


def _collection_row(meta, c) -> dict:
    segs = [x for x in meta.segments.list(c.collection_id) if x.state != "Dropped"]
    return {"id": c.collection_id, "name": c.name, "db": c.db, "state": c.state,
            "partitions": len(c.partitions), "shards": c.shards, "segments": len(segs),
            "rows": sum(x.num_rows for x in segs), "bytes": sum(x.total_size() for x in segs)}


def cmd_collections_list(args, s: Settings) -> int:
    meta, _ = open_meta_store(s)
    rows = [_collection_row(meta, c) for c in meta.catalog.list(db=args.db, include_dropped=args.all)]
    for r in rows:
        r["size"] = human_bytes(r["bytes"])
    emit(args, rows, rows, ["id", "name", "db", "state", "partitions", "shards", "segments", "rows", "size"])
    return 0


def cmd_collections_describe(args, s: Settings) -> int:
    meta, _ = open_meta_store(s)
    c = meta.catalog.get_by_name(args.name, args.db)
    data = {**c.to_json(), **{k: v for k, v in _collection_row(meta, c).items() if k in ("segments", "rows", "bytes")}}
    text = "\n".join([
        f"collection {c.name!r}  id {c.collection_id}  db {c.db}  state {c.state}",
        f"segments {data['segments']}  rows {data['rows']}  size {human_bytes(data['bytes'])}",
        f"shards {c.shards}: {', '.join(c.vchannels)}",
        "partitions: " + ", ".join(f"{p.name} ({p.partition_id})" for p in c.partitions),
        "schema:",
        table([{"field_id": f.field_id, "name": f.name, "type": f.dtype, "primary": f.is_primary or None,
                "dim": f.dim} for f in c.schema.fields], ["field_id", "name", "type", "primary", "dim"]),
    ])
    emit(args, data, text=text)
    return 0


def cmd_collections_drop(args, s: Settings) -> int:
    """Begin (or continue) dropping a collection; --wait blocks until the flushers
    (wal_flush) released every vchannel, then finishes. Refused on a terminal without --yes."""
    from seglake.lifecycle import drop

    if not args.yes and sys.stdin.isatty():
        raise ValidationError(f"refusing to drop collection {args.name!r} without --yes")
    meta, store = open_meta_store(s)
    rep = drop.drop_collection(meta, store, s, args.name, args.db, wait=args.wait,
                               timeout=args.timeout_hours * 3600, poll=1.0)
    emit(args, rep, text=drop.format_status(rep, s.drop_tolerance))
    return 0


def cmd_segments_list(args, s: Settings) -> int:
    meta, _ = open_meta_store(s)
    c = meta.catalog.get_by_name(args.collection, args.db)
    states = [args.state] if args.state else None
    # by partition, then segment id as a number (etcd's key order is textual: 1577, 20001, 4, 40001)
    segs = sorted(meta.segments.list(c.collection_id, states=states), key=lambda x: (x.partition_id, x.segment_id))
    if args.json:
        emit(args, [x.to_json() for x in segs])
        return 0
    rows = [{"segment": x.segment_id, "partition": x.partition_id, "channel": x.channel, "state": x.state,
             "level": x.level, "rows": x.num_rows, "files": x.file_count(), "size": human_bytes(x.total_size()),
             "lineage": _lineage(x)}
            for x in segs]
    emit(args, None, rows, ["segment", "partition", "channel", "state", "level", "rows", "files", "size", "lineage"])
    return 0


def _lineage(seg) -> str:
    """Compaction lineage: '-> out' on a compacted input, '<- a,b,c' on an output."""
    if seg.compacted_to == 0:
        return "-> folded"          # an L0 delete segment folded into the segments it hit
    if seg.compacted_to is not None:
        return f"-> {seg.compacted_to}"
    if seg.compacted_from:
        ids = ",".join(str(i) for i in seg.compacted_from[:4])
        return f"<- {ids}{',...' if len(seg.compacted_from) > 4 else ''} ({len(seg.compacted_from)})"
    return ""


def cmd_verify(args, s: Settings) -> int:
    from seglake.lifecycle import verify

    meta, store = open_meta_store(s)
    report = verify.verify_collection(meta, store, args.collection, args.db)
    emit(args, report, text=verify.format_report(report))
    if not report["ok"]:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(report["problem_counts"].items()))
        return fail(args.prog, f"collection {report['collection']!r}: {counts} in "
                               f"{len(report['bad_segments'])} segment(s)", EXIT_FAILED, s)
    return 0
