"""`seglake` command line: demo data, inspection, local stack.

Configuration comes from the environment (SEGLAKE_CONFIG JSON, SEGLAKE_<KEY>), see
`seglake config show`. Every listing prints a table, or JSON with --json.

Every failure a user can cause or meet goes through `fail()`: one line on stderr,
`seglake <command>: error: <message>` (argparse's own format), no traceback, any
configured secret's value masked, and one exit code per outcome:
  0  done
  1  the operation ran and failed: etcd or the store unreachable, corrupt data, files
     that could not be deleted, `verify` found problems, a watched job Failed
  2  refused as asked, nothing done: bad usage or value, a name that does not exist, a
     state or a conflict that forbids it (ValidationError, NotFound, StateError, Conflict)
  3  `stack status` / `cluster status`: down
  130 interrupted (Ctrl-C)
"""

from __future__ import annotations

import argparse
import re
import difflib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterable

from seglake.config import Settings
from seglake.progress import utc_time
from seglake.errors import Conflict, NotFound, SeglakeError, StateError, ValidationError

EXIT_FAILED, EXIT_REFUSED, EXIT_INTERRUPTED = 1, 2, 130
REFUSED = (ValidationError, NotFound, StateError, Conflict)


def table(rows: list[dict], columns: list[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    out = [fmt.format(*columns), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*row) for row in cells]
    return "\n".join(out)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    return str(v)


from seglake.progress import human_bytes  # noqa: E402,F401  (one formatter; `cli.human_bytes` stays importable)


def emit(args, data: Any, rows: list[dict] | None = None, columns: list[str] | None = None,
         text: str | None = None) -> None:
    if args.json:
        print(json.dumps(data, indent=2, default=str))
    elif text is not None:
        print(text)
    else:
        print(table(rows or [], columns or []))


# -- commands --------------------------------------------------------------------------
def _open(settings: Settings):
    from seglake.meta import Meta
    from seglake.storage import open_store
    return Meta.from_settings(settings), open_store(settings)


def cmd_demo_seed(args, s: Settings) -> int:
    from seglake.dev import demo

    params = demo.SeedParams(name=args.name, db=args.db, partitions=args.partitions, segments=args.segments,
                             rows=args.rows, dim=args.dim, shards=args.shards).validate()
    meta, store = _open(s)
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

    meta, store = _open(s)
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
    meta, _ = _open(s)
    rows = [_collection_row(meta, c) for c in meta.catalog.list(db=args.db, include_dropped=args.all)]
    for r in rows:
        r["size"] = human_bytes(r["bytes"])
    emit(args, rows, rows, ["id", "name", "db", "state", "partitions", "shards", "segments", "rows", "size"])
    return 0


def cmd_collections_describe(args, s: Settings) -> int:
    meta, _ = _open(s)
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
    meta, store = _open(s)
    rep = drop.drop_collection(meta, store, s, args.name, args.db, wait=args.wait,
                               timeout=args.timeout_hours * 3600, poll=1.0)
    emit(args, rep, text=drop.format_status(rep, s.drop_tolerance))
    return 0


def cmd_segments_list(args, s: Settings) -> int:
    meta, _ = _open(s)
    c = meta.catalog.get_by_name(args.collection, args.db)
    states = [args.state] if args.state else None
    segs = list(meta.segments.list(c.collection_id, states=states))
    if args.json:
        emit(args, [x.to_json() for x in segs])
        return 0
    rows = [{"segment": x.segment_id, "partition": x.partition_id, "channel": x.channel, "state": x.state,
             "level": x.level, "rows": x.num_rows, "files": x.file_count(), "size": human_bytes(x.total_size())}
            for x in segs]
    emit(args, None, rows, ["segment", "partition", "channel", "state", "level", "rows", "files", "size"])
    return 0


def cmd_verify(args, s: Settings) -> int:
    from seglake.lifecycle import verify

    meta, store = _open(s)
    report = verify.verify_collection(meta, store, args.collection, args.db)
    emit(args, report, text=verify.format_report(report))
    if not report["ok"]:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(report["problem_counts"].items()))
        return fail(args.prog, f"collection {report['collection']!r}: {counts} in "
                               f"{len(report['bad_segments'])} segment(s)", EXIT_FAILED, s)
    return 0


def _snapshot_rows(items: list[dict]) -> list[dict]:
    import datetime as dt

    def when(t):
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if t else None

    return [{**x, "created": when(x["created_at"]), "expires": when(x["expires_at"]),
             "size": human_bytes(x["bytes"])} for x in items]


def cmd_snapshots_list(args, s: Settings) -> int:
    from seglake.lifecycle import snapshot

    meta, _ = _open(s)
    items = snapshot.list_snapshots(meta, args.collection, db=args.db, include_all=args.all)
    emit(args, items, _snapshot_rows(items),
         ["collection", "name", "state", "created", "segments", "rows", "size", "expires"])
    return 0


def cmd_snapshots_describe(args, s: Settings) -> int:
    from seglake.lifecycle import snapshot

    meta, store = _open(s)
    d = snapshot.describe(meta, store, args.collection, args.name, db=args.db)
    row = _snapshot_rows([d])[0]
    lines = [f"snapshot {d['name']!r} of collection {d['collection']!r} (id {d['snapshot_id']}): {d['state']}",
             f"created {row['created']} UTC, expires {row['expires'] or 'never'}",
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

    meta, store = _open(s)
    rec = snapshot.create(meta, store, args.collection, args.name, args.description, db=args.db,
                          ttl=args.ttl_hours * 3600 if args.ttl_hours else None,
                          per_file=s.segments_per_manifest)
    emit(args, snapshot.info(rec), text=f"snapshot {rec.name!r} {rec.state}: {rec.segments} segments, "
                                        f"{rec.rows} rows, {rec.manifests} manifests")
    return 0


def cmd_snapshots_drop(args, s: Settings) -> int:
    from seglake.lifecycle import snapshot

    meta, store = _open(s)
    result = snapshot.drop(meta, store, args.collection, args.name, db=args.db)
    emit(args, result, text=f"dropped snapshot {args.name!r}: {result['files_removed']} files removed")
    return 0


def cmd_snapshots_pin(args, s: Settings) -> int:
    from seglake.lifecycle import snapshot

    meta, _ = _open(s)
    d = snapshot.pin(meta, args.collection, args.name, args.ttl_hours * 3600, db=args.db, by=args.by)
    emit(args, d, text=f"pin {d['pin_id']}: snapshot {args.name!r} of {args.collection!r} is kept until "
                       f"{utc_time(d['expires_at'])} (unpin with `seglake snapshots unpin {d['pin_id']}`)")
    return 0


def cmd_snapshots_unpin(args, s: Settings) -> int:
    from seglake.lifecycle import snapshot

    meta, _ = _open(s)
    d = snapshot.unpin(meta, args.pin_id)
    emit(args, d, text=f"unpinned {d['pin_id']} (snapshot {d['snapshot']!r} of {d['collection']!r})")
    return 0


def cmd_snapshots_pins(args, s: Settings) -> int:
    from seglake.lifecycle import snapshot

    meta, _ = _open(s)
    items = snapshot.list_pins(meta, args.collection, db=args.db)
    emit(args, items, [{"pin": d["pin_id"], "collection": d["collection"], "snapshot": d["snapshot"],
                        "until": utc_time(d["expires_at"]), "by": d.get("by") or "-"} for d in items],
         ["pin", "collection", "snapshot", "until", "by"], text=None if items else "no pins")
    return 0


def _policy_text(d: dict) -> str:
    from seglake.lifecycle.retention import KEYS
    return (", ".join(f"{k.removeprefix('keep_')} {d[k]}" for k in KEYS if d.get(k))
            + ("; exported to the backup target" if d.get("export") else ""))


def cmd_retention_set(args, s: Settings) -> int:
    from seglake.lifecycle import retention

    meta, _ = _open(s)
    given = {k: getattr(args, k) for k in retention.POLICY_KEYS if getattr(args, k) is not None}
    d = retention.set_policy(meta, args.collection, given, db=args.db)
    emit(args, d, text=f"retention of {args.collection!r}: keep {_policy_text(d)}")
    return 0


def cmd_retention_show(args, s: Settings) -> int:
    from seglake.lifecycle import retention

    meta, _ = _open(s)
    d = retention.get_policy(meta, args.collection, db=args.db)
    if d is None:
        raise NotFound(f"collection {args.collection!r} has no retention policy")
    emit(args, d, text=f"retention of {args.collection!r}: keep {_policy_text(d)}")
    return 0


def cmd_retention_clear(args, s: Settings) -> int:
    from seglake.lifecycle import retention

    meta, _ = _open(s)
    gone = retention.clear_policy(meta, args.collection, db=args.db)
    emit(args, {"cleared": gone}, text=f"retention of {args.collection!r} " + ("cleared" if gone else "was not set"))
    return 0


def cmd_retention_list(args, s: Settings) -> int:
    from seglake.lifecycle import retention

    meta, _ = _open(s)
    items = retention.list_policies(meta)
    emit(args, items, [{"collection": d["collection"], "db": d["db"], "keep": _policy_text(d)} for d in items],
         ["collection", "db", "keep"])
    return 0


def cmd_retention_run(args, s: Settings) -> int:
    from seglake.lifecycle.backup import scheduled
    from seglake.lifecycle.backup.bundle import open_target

    meta, store = _open(s)
    reports = scheduled.run(meta, store, lambda: open_target(s), now=time.time(), dry_run=args.dry_run,
                            collection=args.collection, db=args.db, threads=s.copy_threads, by="cli")
    emit(args, reports, text="\n".join(map(scheduled.report_line, reports)) or "no retention policies")
    return 0 if not any("error" in r for r in reports) else 2


def _bar(fraction: float, width: int = 30) -> str:
    n = int(round(fraction * width))
    return "[" + "#" * n + "." * (width - n) + f"] {fraction * 100:5.1f}%"


def _job_row(j: dict) -> dict:
    p = j["progress"]
    return {"job": j["job_id"], "state": j["state"], "source": f"{j['source_collection']}/{j['snapshot']}",
            "target": j["target_collection"], "segments": f"{p['copied_segments']}/{p['total_segments']}",
            "size": human_bytes(j["total_bytes"]), "duration": f"{j['duration_s']:.1f}s",
            "reason": j["reason"] or None}


def cmd_jobs_list(args, s: Settings) -> int:
    from seglake.lifecycle import copyjob

    meta, _ = _open(s)
    jobs = copyjob.list_jobs(meta, args.collection)
    emit(args, jobs, [_job_row(j) for j in jobs],
         ["job", "state", "source", "target", "segments", "size", "duration", "reason"])
    return 0


def cmd_jobs_describe(args, s: Settings) -> int:
    import time

    from seglake.lifecycle import copyjob

    meta, _ = _open(s)
    while True:
        j = copyjob.describe_job(meta, args.job_id)
        p = j["progress"]
        if args.json:
            emit(args, j)
        else:
            print(f"copy job {j['job_id']}: {j['state']}  {j['source_collection']}/{j['snapshot']} -> "
                  f"{j['target_collection']}")
            print(f"  {_bar(j['fraction'])}  segments {p['copied_segments']}/{p['total_segments']}, "
                  f"files {p['copied_files']}/{p['total_files']}, "
                  f"{human_bytes(p['copied_bytes'])}/{human_bytes(p['total_bytes'])}")
            print(f"  tasks {p['tasks_completed']}/{p['tasks']} completed, {p['tasks_failed']} failed; "
                  f"duration {j['duration_s']:.1f}s; rows {j['total_rows']}"
                  + (f"; reason: {j['reason']}" if j["reason"] else ""))
        if j["state"] == "Failed":
            return fail(args.prog, f"copy job {j['job_id']} Failed: {j['reason']}", EXIT_FAILED, s)
        if not args.watch or j["state"] == "Completed":
            return 0
        time.sleep(args.interval)


def cmd_gc_report(args, s: Settings) -> int:
    from seglake.lifecycle import gc

    _, store = _open(s)
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
    print("deleted: " + (f"{swept['deleted']} files, {human_bytes(swept['deleted_bytes'])}, "
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

    meta, store = _open(s)
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

    meta, _ = _open(s)
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

    meta, _ = _open(s)
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


def cmd_config_show(args, s: Settings) -> int:
    if args.airflow:
        return _config_show_airflow(args)
    pub = s.to_public()
    emit(args, pub, [{"key": k, "value": v} for k, v in pub.items()], ["key", "value"])
    return 0


def _config_show_airflow(args) -> int:
    """The settings a DAG run would use, each key with its layer. Resolved by the Airflow
    side (plugins/seglake_airflow/config_show.py), run as a program: the engine never
    imports the plugin. Its output and exit code are passed through."""
    import importlib.util
    import subprocess

    from seglake.config import _REPO

    if importlib.util.find_spec("airflow") is None:
        raise ValidationError("--airflow needs Apache Airflow importable (run it with the project's venv)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_REPO / "plugins"), str(_REPO / "include")]
                                        + [p for p in [env.get("PYTHONPATH")] if p])
    sys.stdout.flush()
    return subprocess.run([sys.executable, "-m", "seglake_airflow.config_show"] + (["--json"] if args.json else []),
                          env=env).returncode


def _stack_etcd(s: Settings):
    from seglake.config import DEFAULT_HOME
    from seglake.dev.devstack import EtcdServer

    host, _, port = s.etcd_endpoint.rpartition(":")
    if host not in ("127.0.0.1", "localhost") or "," in s.etcd_endpoint:
        raise ValidationError(f"the local stack runs etcd on loopback; etcd_endpoint is {s.etcd_endpoint!r}")
    return EtcdServer(state_dir=Path(DEFAULT_HOME) / "etcd", ports={"client": int(port), "peer": int(port) + 1})


def cmd_stack(args, s: Settings) -> int:
    from seglake.dev.devstack import port_open

    etcd = _stack_etcd(s)
    pid = etcd.running_pid()
    if args.action == "up":
        if pid:
            print(f"etcd already running: pid {pid}, {etcd.endpoint}")
        elif port_open(etcd.ports["client"]):
            raise SeglakeError(f"port {etcd.ports['client']} is taken by another process; set SEGLAKE_ETCD_ENDPOINT")
        else:
            etcd.start(detach=True)
            print(f"etcd started: pid {etcd.proc.pid}, {etcd.endpoint}, data {etcd.state_dir}, log {etcd.log_file}")
        print(f"store: {s.store_uri}")
    elif args.action == "down":
        if pid:
            etcd.stop()
            print(f"etcd stopped (pid {pid})")
        else:
            print("etcd not running")
    else:
        ok = bool(pid) and etcd.healthy()
        print(f"etcd: {'up' if ok else 'down'}" + (f" pid {pid} {etcd.endpoint}" if pid else ""))
        print(f"store: {s.store_uri}")
        return 0 if ok else 3
    return 0


def cmd_cluster(args, s: Settings) -> int:
    """The scale-out profile (seglake.dev.cluster): 3 etcd members, SeaweedFS, Spark standalone."""
    from seglake.dev.cluster import ClusterError, ClusterStack
    from seglake.config import DEFAULT_HOME

    base = Path(args.base) if args.base else Path(DEFAULT_HOME) / "cluster"
    try:
        if args.action == "up":
            stack = ClusterStack(base=base, workers=args.workers)
            outcome = stack.up(detach=True, timeout=args.timeout)
            _print_cluster(stack.status(), args.json, "already running" if outcome == "running" else "started")
            return 0
        if args.action == "down":
            stopped = ClusterStack(base=base).down()
            print("stopped: " + ", ".join(stopped) if stopped else "cluster not running: nothing to stop")
            return 0
        stack = ClusterStack.attach(base)
        if args.action == "env":
            print(stack.env_file)
            return 0
        if args.action == "apps":
            apps = stack.spark_apps()
            if args.since:
                apps = [a for a in apps if a["id"] > args.since]
            rows = [{"app": a["id"], "name": a["name"], "state": a["state"],
                     "duration": f"{(a['duration_ms'] or 0) / 1000:.1f}s",
                     "executors": sorted(f"{e['executor']}@{e['host']}" for e in a["executors"])} for a in apps]
            emit(args, apps, rows, ["app", "name", "state", "duration", "executors"])
            return 0
        st = stack.status()
        _print_cluster(st, args.json, "status")
        ok = (all(m["healthy"] for m in st["etcd"]["members"]) and st["s3"]["healthy"] and st["spark"]["alive"]
              and all(w["alive"] for w in st["spark"]["workers"]))
        return 0 if ok else 3
    except ClusterError as e:
        if args.action == "status":
            print(f"cluster: down ({e})")
            return 3
        raise


def _print_cluster(st: dict, as_json: bool, what: str) -> None:
    if as_json:
        print(json.dumps(st, indent=2))
        return
    print(f"cluster {what} ({st['base']}):")
    for m in st["etcd"]["members"]:
        print(f"  etcd {m['member']:<3} {m['endpoint']:<22} pid {m['pid'] or '-':<8} "
              f"{'up' if m['healthy'] else 'DOWN'}{'  leader' if m['leader'] else ''}")
    s3 = st["s3"]
    print(f"  s3       {s3['endpoint']:<22} pid {s3['pid'] or '-':<8} {'up' if s3['healthy'] else 'DOWN'}"
          f"  store {s3['store_uri']}")
    sp = st["spark"]
    print(f"  spark    {sp['master']:<22} pid {sp['pid'] or '-':<8} {'up' if sp['alive'] else 'DOWN'}"
          f"  web UI {sp['webui']}")
    for w in sp["workers"]:
        print(f"  worker   {w['host']:<22} pid {w['pid'] or '-':<8} {'up' if w['alive'] else 'DOWN'}"
              f"  {w['cores']} core, {w['memory']}")
    if st.get("startup_s", {}).get("total") is not None and what == "started":
        print(f"  started in {st['startup_s']['total']:.1f} s")
    print(f"  profile: set -a; . {st['env_file']}; set +a   (Airflow connections + SEGLAKE_* for the CLI)")


# -- write-ahead log (wal helper) -------------------------------------------------------
def cmd_ingest(args, s: Settings) -> int:
    """Append rows from a Parquet/Arrow file or --rows N synthetic rows through the WAL."""
    from seglake.wal.client import WalClient, check_count, synthetic_rows

    if (args.file is None) == (args.rows is None):
        raise ValidationError("give exactly one of --file PATH or --rows N")
    batch_rows = check_count("--batch-rows", args.batch_rows, maximum=1_000_000)
    meta, store = _open(s)
    coll = meta.catalog.get_by_name(args.collection, args.db)
    if args.rows is not None:
        n = check_count("--rows", args.rows, maximum=100_000_000)
        data = synthetic_rows(coll, n, meta.ids.allocate(n), seed=args.seed)
    else:
        data = _read_table(args.file)
    with WalClient(meta, store, s, batch_rows=batch_rows) as client:
        res = client.insert(args.collection, data, partition=args.partition, db=args.db, txn=args.txn)
    emit(args, res.to_json(), text=(f"appended {res.rows} rows to {res.collection!r} in {res.batches} batches"
                                    f"{' (transactional)' if args.txn else ''}: "
                                    + "; ".join(f"{p} {a} .. {b}" for p, (a, b) in sorted(res.positions.items()))))
    return 0


def _read_table(path: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = Path(path)
    if not p.is_file():
        raise ValidationError(f"no such file {path!r}")
    try:
        if p.suffix in (".arrow", ".ipc", ".feather"):
            with pa.memory_map(str(p)) as src:
                try:
                    return pa.ipc.open_file(src).read_all()
                except pa.ArrowInvalid:
                    src.seek(0)
                    return pa.ipc.open_stream(src).read_all()
        return pq.read_table(str(p))
    except (pa.ArrowInvalid, OSError) as e:
        raise ValidationError(f"cannot read {path!r}: {e}") from None


def cmd_delete(args, s: Settings) -> int:
    from seglake.wal.client import WalClient

    pks = []
    for part in args.pks.split(","):
        part = part.strip()
        if not re.fullmatch(r"-?[0-9]+", part, re.ASCII):  # ASCII only: int() also takes other digits
            raise ValidationError(f"--pks must be comma-separated integers, got {part!r}")
        pks.append(int(part))
    meta, store = _open(s)
    with WalClient(meta, store, s) as client:
        res = client.delete(args.collection, pks, db=args.db, txn=args.txn)
    emit(args, res.to_json(), text=f"appended deletes of {res.deletes} primary keys to {res.collection!r}")
    return 0


def cmd_wal_status(args, s: Settings) -> int:
    from seglake.wal.client import wal_status

    from seglake.progress import tick_time

    meta, _ = _open(s)
    rows = wal_status(meta, args.pchannel)
    table_rows = []
    for r in rows:
        table_rows.append({**r, "size": human_bytes(r["bytes"]), "last tick (UTC)": tick_time(r["last_time_tick"]),
                           "checkpoint lag": _lags(r["consumers"]),
                           "txns": ",".join(f"{t['txn_id']}@{t['vchannel']}" for t in r["open_txns"]) or "-"})
    emit(args, rows, table_rows, ["pchannel", "term", "writer", "last tick (UTC)", "fragments", "size", "paused",
                                  "checkpoint lag", "txns"])
    return 0


def _lags(consumers: list[dict]) -> str:
    """Each vchannel's checkpoint lag behind the log, or why there is none."""
    if not consumers:
        return "no vchannels"
    if all(c["lag_ms"] is None for c in consumers):
        return "no checkpoint yet (not flushed)"
    return ", ".join(f"{c['vchannel']}: "
                     + ("no checkpoint" if c["lag_ms"] is None else f"{c['lag_ms'] / 1000:g} s") for c in consumers)


def cmd_wal_pause(args, s: Settings) -> int:
    from seglake.wal.log import set_pause

    if bool(args.pchannel) == bool(args.all):
        raise ValidationError("give exactly one of --pchannel NAME or --all")
    meta, _ = _open(s)
    set_pause(meta, args.pchannel, args.action == "pause", getattr(args, "reason", ""))
    print(f"WAL consumption {'paused' if args.action == 'pause' else 'resumed'} for "
          f"{args.pchannel or 'every pchannel'}")
    return 0


def add_wal_parsers(sub, out, common) -> None:
    ing = sub.add_parser("ingest", parents=[common], help="append rows through the write-ahead log")
    ing.add_argument("collection")
    ing.add_argument("--file", default=None, help="Parquet or Arrow IPC file whose columns match the schema")
    ing.add_argument("--rows", type=int, default=None, help="append N synthetic rows")
    ing.add_argument("--partition", default="_default")
    ing.add_argument("--batch-rows", type=int, default=10000)
    ing.add_argument("--seed", type=int, default=0)
    ing.add_argument("--txn", action="store_true", help="one transaction per vchannel")
    ing.set_defaults(fn=cmd_ingest)
    de = sub.add_parser("delete", parents=[common], help="append deletes by primary key through the WAL")
    de.add_argument("collection")
    de.add_argument("--pks", required=True, help="comma-separated primary keys")
    de.add_argument("--txn", action="store_true")
    de.set_defaults(fn=cmd_delete)
    w = sub.add_parser("wal", help="write-ahead log").add_subparsers(dest="action", required=True)
    ws = w.add_parser("status", parents=[out], help="per pchannel: term, writer, ticks, fragments, pause, lag")
    ws.add_argument("--pchannel", default=None)
    ws.set_defaults(fn=cmd_wal_status)
    for action in ("pause", "resume"):
        wp = w.add_parser(action, help=f"{action} consumption (recovery scanners are never paused)")
        wp.add_argument("--pchannel", default=None)
        wp.add_argument("--all", action="store_true", help="the global flag")
        if action == "pause":
            wp.add_argument("--reason", default="")
        wp.set_defaults(fn=cmd_wal_pause, json=False)


# -- argument types: every flag checked before any command runs ------------------------
def name_arg(kind: str):
    """argparse type: a name that full-matches the name pattern (no trailing newline)."""
    def parse(text: str) -> str:
        from seglake.errors import ValidationError
        from seglake.names import validate_name

        try:
            return validate_name(kind, text)
        except ValidationError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = f"{kind} name"
    return parse


def number_arg(limit: str, scale: float = 1.0):
    """argparse type: a number checked against seglake.limits LIMITS[limit] (finite, in
    range, an integer where the limit says so), given in units of `scale` (HOUR: hours).
    Returns the number as typed (not scaled)."""
    from seglake.limits import LIMITS

    lim = LIMITS[limit]

    def parse(text: str) -> int | float:
        from seglake.errors import ValidationError

        try:  # plain decimal only: float() would take 'nan', '+5', '1e3', ' 5', '-0.0'
            return lim.parse("value", text, scale)
        except ValidationError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("value: ")) from None
    parse.__name__ = "integer" if lim.integer else "number"
    return parse


# -- parser ----------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    """argparse, but an unrecognised flag is refused naming the closest option of the
    subcommand it was given to ("--tll-hours ... did you mean --ttl-hours?"), and every
    usage error leaves through `fail()` (exit 2, secrets masked)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        raise SystemExit(fail(self.prog, message, EXIT_REFUSED))

    def parse_args(self, args=None, namespace=None):
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self.chosen(ns)
            known = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
            hints = []
            for arg in extras:
                flag = arg.split("=", 1)[0]
                close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6) if flag.startswith("-") else []
                if close:
                    hints.append(f"{flag}: did you mean {close[0]}?")
            parser.error(f"unrecognized arguments: {' '.join(extras)}" + ("; " + "; ".join(hints) if hints else ""))
        return ns

    def chosen(self, ns: argparse.Namespace) -> argparse.ArgumentParser:
        """The deepest subcommand parser `ns` selected (self when there is none)."""
        parser = self
        while True:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            nxt = next((a.choices[v] for a in subs if (v := getattr(ns, a.dest, None)) in a.choices), None)
            if nxt is None:
                return parser
            parser = nxt


def build_parser() -> argparse.ArgumentParser:
    from seglake.limits import HOUR

    coll_t, snap_t, db_t = name_arg("collection"), name_arg("snapshot"), name_arg("db")
    p = Parser(prog="seglake", description=__doc__.splitlines()[0])
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument("--json", action="store_true", help="machine-readable output")
    common = argparse.ArgumentParser(add_help=False, parents=[out])
    common.add_argument("--db", default="default", type=db_t, help="database (default: default)")
    sub = p.add_subparsers(dest="group", required=True)

    demo = sub.add_parser("demo", help="demo data").add_subparsers(dest="action", required=True)
    seed = demo.add_parser("seed", parents=[common], help="create a demo collection with real segment files")
    seed.add_argument("--name", default="demo", type=coll_t)
    for flag, default in (("partitions", 2), ("segments", 4), ("rows", 1000), ("dim", 16), ("shards", 2)):
        seed.add_argument(f"--{flag}", type=number_arg(f"demo_{flag}"), default=default)
    seed.add_argument("--reset", action="store_true",
                      help="purge an existing demo collection of that name first (refused for other data)")
    seed.set_defaults(fn=cmd_demo_seed)
    purge = demo.add_parser("purge", parents=[common],
                            help="delete a demo collection's files and records (refused for any other "
                                 "collection, and while a snapshot or copy job uses it)")
    purge.add_argument("name", type=coll_t)
    purge.set_defaults(fn=cmd_demo_purge)

    colls = sub.add_parser("collections", help="collections").add_subparsers(dest="action", required=True)
    cl = colls.add_parser("list", parents=[out])
    cl.add_argument("--db", default=None, type=db_t, help="only this database")
    cl.add_argument("--all", action="store_true", help="include dropped collections")
    cl.set_defaults(fn=cmd_collections_list)
    cd = colls.add_parser("describe", parents=[common])
    cd.add_argument("name", type=coll_t)
    cd.set_defaults(fn=cmd_collections_describe)
    cdr = colls.add_parser("drop", parents=[common],
                           help="drop a collection: Dropping, flush-and-drop by wal_flush, then Dropped "
                                "(files stay until GC's drop_tolerance; snapshots stay restorable)")
    cdr.add_argument("name", type=coll_t)
    cdr.add_argument("--wait", action="store_true", help="wait until every vchannel is released, then finish")
    cdr.add_argument("--timeout-hours", type=number_arg("drop_timeout", HOUR), default=1.0,
                     help="with --wait: give up after this long (default 1)")
    cdr.add_argument("--yes", action="store_true", help="do not ask (required on a terminal)")
    cdr.set_defaults(fn=cmd_collections_drop)

    segs = sub.add_parser("segments", help="segments").add_subparsers(dest="action", required=True)
    sl = segs.add_parser("list", parents=[common])
    sl.add_argument("collection", type=coll_t)
    sl.add_argument("--state", choices=["Growing", "Sealed", "Flushed", "Importing", "Dropped"])
    sl.set_defaults(fn=cmd_segments_list)

    snaps = sub.add_parser("snapshots", help="snapshots").add_subparsers(dest="action", required=True)
    sn = snaps.add_parser("list", parents=[common])
    sn.add_argument("--collection", default=None, type=coll_t)
    sn.add_argument("--all", action="store_true", help="include PENDING and DELETING records")
    sn.set_defaults(fn=cmd_snapshots_list)
    sd = snaps.add_parser("describe", parents=[common])
    sd.add_argument("collection", type=coll_t)
    sd.add_argument("name", type=snap_t)
    sd.set_defaults(fn=cmd_snapshots_describe)
    sc = snaps.add_parser("create", parents=[common], help="create inline (the DAG runs it on Spark)")
    sc.add_argument("collection", type=coll_t)
    sc.add_argument("name", type=snap_t)
    sc.add_argument("--description", default="")
    sc.add_argument("--ttl-hours", type=number_arg("snapshot_ttl", HOUR), default=0)
    sc.set_defaults(fn=cmd_snapshots_create)
    sx = snaps.add_parser("drop", parents=[common])
    sx.add_argument("collection", type=coll_t)
    sx.add_argument("name", type=snap_t)
    sx.set_defaults(fn=cmd_snapshots_drop)
    sp = snaps.add_parser("pin", parents=[common], help="keep a snapshot (no drop, GC keeps its files) for a while")
    sp.add_argument("collection", type=coll_t)
    sp.add_argument("name", type=snap_t)
    sp.add_argument("--ttl-hours", type=number_arg("pin_ttl", HOUR), required=True,
                    help="how long the pin holds (hours, fractions allowed; at most 8760)")
    sp.add_argument("--by", default="", help="who or what pinned it (shown in the list)")
    sp.set_defaults(fn=cmd_snapshots_pin)
    su = snaps.add_parser("unpin", parents=[out], help="remove a pin by its id")
    su.add_argument("pin_id", type=number_arg("pin_id"))
    su.set_defaults(fn=cmd_snapshots_unpin)
    sps = snaps.add_parser("pins", parents=[common], help="list the unexpired pins")
    sps.add_argument("--collection", default=None, type=coll_t)
    sps.set_defaults(fn=cmd_snapshots_pins)

    jobs = sub.add_parser("jobs", help="copy-segment jobs").add_subparsers(dest="action", required=True)
    jl = jobs.add_parser("list", parents=[out])
    jl.add_argument("--collection", default=None, type=coll_t,
                    help="jobs whose source or target is this collection")
    jl.set_defaults(fn=cmd_jobs_list)
    jd = jobs.add_parser("describe", parents=[out])
    jd.add_argument("job_id", type=number_arg("id"))
    jd.add_argument("--watch", action="store_true", help="refresh until the job finishes")
    jd.add_argument("--interval", type=number_arg("poll_interval"), default=2.0)
    jd.set_defaults(fn=cmd_jobs_describe)

    g = sub.add_parser("gc", help="garbage collection").add_subparsers(dest="action", required=True)
    g.add_parser("report", parents=[out], help="the latest mark: candidates and what was deleted").set_defaults(
        fn=cmd_gc_report)
    gr = g.add_parser("run", parents=[common], help="run GC inline: a dry run unless --execute")
    gr.add_argument("--execute", action="store_true", help="really delete (default: dry run, report only)")
    gr.add_argument("--collection", default=None, type=coll_t,
                    help="only this collection (default: the whole store)")
    gr.add_argument("--missing-tolerance-hours", type=number_arg("missing_tolerance", HOUR), default=None,
                    help="age before an orphan is deleted (default: from config)")
    gr.add_argument("--drop-tolerance-hours", type=number_arg("drop_tolerance", HOUR), default=None,
                    help="age of a Dropped segment before its files go (default: from config)")
    gr.add_argument("--force", action="store_true", help="allow tolerances below the floor")
    gr.set_defaults(fn=cmd_gc_run)
    gs = g.add_parser("schedule", help="the settings scheduled gc runs use (refused until set)").add_subparsers(
        dest="schedule_action", required=True)
    gss = gs.add_parser("set", parents=[common], help="record what a scheduled gc run does")
    mode = gss.add_mutually_exclusive_group(required=True)
    mode.add_argument("--dry-run", action="store_true", help="scheduled runs only mark (delete nothing)")
    mode.add_argument("--execute", action="store_true", help="scheduled runs really delete")
    gss.add_argument("--collection", default=None, type=coll_t, help="only this collection (default: whole store)")
    gss.add_argument("--missing-tolerance-hours", type=number_arg("missing_tolerance", HOUR), default=None,
                     help="age before an orphan is deleted (default: from config when the run starts)")
    gss.add_argument("--drop-tolerance-hours", type=number_arg("drop_tolerance", HOUR), default=None,
                     help="age of a Dropped segment before its files go (default: from config)")
    gss.add_argument("--force", action="store_true", help="allow tolerances below the floor")
    gss.add_argument("--engine", choices=("auto", "spark", "inline"), default="auto")
    gss.set_defaults(fn=cmd_gc_schedule)
    for action in ("show", "clear"):
        gs.add_parser(action, parents=[common]).set_defaults(fn=cmd_gc_schedule)
    for action in ("pause", "resume"):
        gp = g.add_parser(action, parents=[common])
        gp.add_argument("--collection", default=None, type=coll_t)
        if action == "pause":
            gp.add_argument("--ttl-hours", type=number_arg("gc_pause_ttl", HOUR), default=1.0)
            gp.add_argument("--reason", default="")
        gp.set_defaults(fn=cmd_gc_pause)

    ret = sub.add_parser("retention", help="snapshot retention schedules (keep last / hourly / daily / "
                         "weekly / monthly)").add_subparsers(dest="action", required=True)
    rs = ret.add_parser("set", parents=[common], help="set a collection's policy (unset counts are 0)")
    rs.add_argument("collection", type=coll_t)
    for unit in ("last", "hourly", "daily", "weekly", "monthly"):
        rs.add_argument(f"--keep-{unit}", dest=f"keep_{unit}", type=number_arg("retention_keep"), default=None)
    rs.add_argument("--export", action=argparse.BooleanOptionalAction, default=None,
                    help="also keep the schedule's snapshots as bundles in the backup target (backup_uri)")
    rs.set_defaults(fn=cmd_retention_set)
    rsh = ret.add_parser("show", parents=[common])
    rsh.add_argument("collection", type=coll_t)
    rsh.set_defaults(fn=cmd_retention_show)
    rc = ret.add_parser("clear", parents=[common])
    rc.add_argument("collection", type=coll_t)
    rc.set_defaults(fn=cmd_retention_clear)
    rl = ret.add_parser("list", parents=[out])
    rl.set_defaults(fn=cmd_retention_list)
    rr = ret.add_parser("run", parents=[common], help="one schedule run now, inline (the snapshot_schedule DAG "
                                                      "runs it hourly)")
    rr.add_argument("--collection", default=None, type=coll_t, help="only this collection")
    rr.add_argument("--dry-run", action="store_true", help="list what would be created and pruned")
    rr.set_defaults(fn=cmd_retention_run)

    v = sub.add_parser("verify", parents=[common], help="check a collection's files inline (no Spark)")
    v.add_argument("collection", type=coll_t)
    v.set_defaults(fn=cmd_verify)

    cfg = sub.add_parser("config", help="configuration").add_subparsers(dest="action", required=True)
    cs = cfg.add_parser("show", parents=[out])
    cs.add_argument("--airflow", action="store_true",
                    help="resolve like a DAG run: + the Variable seglake_config and the Airflow connections")
    cs.set_defaults(fn=cmd_config_show)

    st = sub.add_parser("stack", help="the local etcd (make up/down/status)")
    st.add_argument("action", choices=["up", "down", "status"])
    st.set_defaults(fn=cmd_stack, json=False)
    cu = sub.add_parser("cluster", parents=[out],
                        help="the scale-out profile: 3 etcd members, SeaweedFS S3, Spark standalone master + "
                             "workers, on loopback (make cluster-up / cluster-down)")
    cu.add_argument("action", choices=["up", "down", "status", "env", "apps"],
                    help="apps: the Spark applications the master ran, with the workers their executors ran on")
    cu.add_argument("--since", default=None, help="apps: only applications after this app id")
    cu.add_argument("--base", default=None, help="state directory (default: $SEGLAKE_HOME/cluster)")
    cu.add_argument("--workers", type=int, choices=range(1, 5), default=2, help="Spark workers (up)")
    cu.add_argument("--timeout", type=number_arg("cluster_timeout"), default=300.0,
                    help="seconds to wait for every server to be healthy (up)")
    cu.set_defaults(fn=cmd_cluster)
    add_wal_parsers(sub, out, common)
    from seglake.cli_backup import add_backup_parsers
    add_backup_parsers(sub, snaps, common, coll_t, snap_t, number_arg)
    return p


# -- errors: the one way out for every failure -------------------------------------------
def _secret_values(settings: Settings | None) -> list[str]:
    """The values to mask: the loaded settings' secrets, else (config did not load) the
    secret SEGLAKE_* variables as given."""
    from dataclasses import fields

    from seglake import config

    if settings is not None:
        values = list(settings.secrets_env().values())
    else:
        values = [os.environ.get(config.ENV_PREFIX + f.name.upper(), "") for f in fields(config.Settings)
                  if f.metadata.get("secret")]
    return sorted({v for v in values if v}, key=len, reverse=True)  # longest first: no partial leftovers


def fail(prog: str, message: str, code: int, settings: Settings | None = None) -> int:
    """Print `prog: error: message` on stderr with every secret value masked; return `code`."""
    for secret in _secret_values(settings):
        message = message.replace(secret, "***")
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code


def exit_code(e: SeglakeError) -> int:
    return EXIT_REFUSED if isinstance(e, REFUSED) else EXIT_FAILED


def main(argv: Iterable[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    args.prog = parser.chosen(args).prog
    settings = None
    try:
        settings = Settings.load()
        return args.fn(args, settings)
    except SeglakeError as e:
        return fail(args.prog, str(e), exit_code(e), settings)
    except KeyboardInterrupt:   # e.g. `jobs describe --watch`: stopped by the user, not a crash
        return fail(args.prog, "interrupted", EXIT_INTERRUPTED, settings)


if __name__ == "__main__":
    sys.exit(main())
