"""Snapshot and retention commands."""

from __future__ import annotations

import time

from seglake.config import Settings
from seglake.progress import utc_time
from seglake.errors import NotFound
from seglake.cli.output import emit, open_meta_store
from seglake.progress import human_bytes


def _snapshot_rows(items: list[dict]) -> list[dict]:
    import datetime as dt

    def when(t):
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if t else None

    return [{**x, "created": when(x["created_at"]), "expires": when(x["expires_at"]),
             "size": human_bytes(x["bytes"])} for x in items]


def cmd_snapshots_list(args, s: Settings) -> int:
    from seglake.lifecycle import snapshot

    meta, _ = open_meta_store(s)
    items = snapshot.list_snapshots(meta, args.collection, db=args.db, include_all=args.all)
    emit(args, items, _snapshot_rows(items),
         ["collection", "name", "state", "created", "segments", "rows", "size", "expires"])
    return 0


def cmd_snapshots_describe(args, s: Settings) -> int:
    from seglake.lifecycle import snapshot

    meta, store = open_meta_store(s)
    d = snapshot.describe(meta, store, args.collection, args.name, db=args.db)
    row = _snapshot_rows([d])[0]
    lines = [f"snapshot {d['name']!r} (id {d['snapshot_id']}) of collection {d['collection']!r} "
             f"(id {d['collection_id']}): {d['state']}",
             f"created {row['created']} UTC, expires " + (f"{row['expires']} UTC" if row["expires"] else "never"),
             f"{d['segments']} segments, {d['rows']} rows, {d['files']} files, {row['size']}, "
             f"{d['partitions']} partitions" + (f" ({', '.join(d['partition_names'])})" if d.get("partition_names") else ""),
             f"consistent at ts {d['consistent_ts']}; location {d['location'] or '-'}"]
    if d.get("manifests"):
        lines.append(f"manifests: {len(d['manifests'])} (" + ", ".join(m["key"] for m in d["manifests"][:3])
                     + (", ..." if len(d["manifests"]) > 3 else "") + ")")
    if d["pins"]:
        lines.append(f"read by restore jobs: {', '.join(map(str, d['pins']))}")
    live = [h for h in d.get("holds", []) if h["expires_at"] > time.time()]
    if live:
        lines.append("pinned: " + ", ".join(f"pin {h['pin_id']} until {utc_time(h['expires_at'])}" for h in live))
    if d["error"]:
        lines.append(f"last error: {d['error']}")
    emit(args, d, text="\n".join(lines))
    return 0


def cmd_snapshots_create(args, s: Settings) -> int:
    from seglake.lifecycle import snapshot

    meta, store = open_meta_store(s)
    rec = snapshot.create(meta, store, args.collection, args.name, args.description, db=args.db,
                          ttl=args.ttl_hours * 3600 if args.ttl_hours else None,
                          per_file=s.segments_per_manifest)
    emit(args, snapshot.info(rec), text=f"snapshot {rec.name!r} {rec.state}: {rec.segments} segments, "
                                        f"{rec.rows} rows, {rec.manifests} manifests")
    return 0


def cmd_snapshots_drop(args, s: Settings) -> int:
    from seglake.lifecycle import snapshot

    meta, store = open_meta_store(s)
    result = snapshot.drop(meta, store, args.collection, args.name, db=args.db)
    emit(args, result, text=f"dropped snapshot {args.name!r}: {result['files_removed']} files removed")
    return 0


def cmd_snapshots_pin(args, s: Settings) -> int:
    from seglake.lifecycle import snapshot

    meta, _ = open_meta_store(s)
    d = snapshot.pin(meta, args.collection, args.name, args.ttl_hours * 3600, db=args.db, by=args.by)
    emit(args, d, text=f"pin {d['pin_id']}: snapshot {args.name!r} of {args.collection!r} is kept until "
                       f"{utc_time(d['expires_at'])} (unpin with `seglake snapshots unpin {d['pin_id']}`)")
    return 0


def cmd_snapshots_unpin(args, s: Settings) -> int:
    from seglake.lifecycle import snapshot

    meta, _ = open_meta_store(s)
    d = snapshot.unpin(meta, args.pin_id)
    emit(args, d, text=f"unpinned {d['pin_id']} (snapshot {d['snapshot']!r} of {d['collection']!r})")
    return 0


def cmd_snapshots_pins(args, s: Settings) -> int:
    from seglake.lifecycle import snapshot

    meta, _ = open_meta_store(s)
    items = snapshot.list_pins(meta, args.collection, db=args.db)
    emit(args, items, [{"pin": d["pin_id"], "collection": d["collection"], "snapshot": d["snapshot"],
                        "until": utc_time(d["expires_at"]), "by": d.get("by") or "-"} for d in items],
         ["pin", "collection", "snapshot", "until", "by"], text=None if items else "no pins")
    return 0


def _policy_text(d: dict) -> str:
    from seglake.lifecycle.retention import KEYS
    return (", ".join(f"{k.removeprefix('keep_')} {d[k]}" for k in KEYS if d.get(k))
            + ("; exported to the backup target" if d.get("export") else "")
            + ("; its WAL archived to the backup target" if d.get("archive") else ""))


def cmd_retention_set(args, s: Settings) -> int:
    from seglake.lifecycle import retention

    meta, _ = open_meta_store(s)
    given = {k: getattr(args, k) for k in retention.POLICY_KEYS if getattr(args, k) is not None}
    d = retention.set_policy(meta, args.collection, given, db=args.db)
    emit(args, d, text=f"retention of {args.collection!r}: keep {_policy_text(d)}")
    return 0


def cmd_retention_show(args, s: Settings) -> int:
    from seglake.lifecycle import retention

    meta, _ = open_meta_store(s)
    d = retention.get_policy(meta, args.collection, db=args.db)
    if d is None:
        raise NotFound(f"collection {args.collection!r} has no retention policy")
    emit(args, d, text=f"retention of {args.collection!r}: keep {_policy_text(d)}")
    return 0


def cmd_retention_clear(args, s: Settings) -> int:
    from seglake.lifecycle import retention

    meta, _ = open_meta_store(s)
    gone = retention.clear_policy(meta, args.collection, db=args.db)
    emit(args, {"cleared": gone}, text=f"retention of {args.collection!r} " + ("cleared" if gone else "was not set"))
    return 0


def cmd_retention_list(args, s: Settings) -> int:
    from seglake.lifecycle import retention

    meta, _ = open_meta_store(s)
    items = retention.list_policies(meta)
    emit(args, items, [{"collection": d["collection"], "db": d["db"], "keep": _policy_text(d)} for d in items],
         ["collection", "db", "keep"])
    return 0


def cmd_retention_run(args, s: Settings) -> int:
    from seglake.lifecycle.backup import scheduled
    from seglake.lifecycle.backup.bundle import open_target

    meta, store = open_meta_store(s)
    reports = scheduled.run(meta, store, lambda: open_target(s), now=time.time(), dry_run=args.dry_run,
                            collection=args.collection, db=args.db, threads=s.copy_threads, by="cli")
    emit(args, reports, text="\n".join(map(scheduled.report_line, reports)) or "no retention policies")
    return 0 if not any("error" in r for r in reports) else 2
