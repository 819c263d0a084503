"""The command tree (argparse), one place."""

from __future__ import annotations

import argparse
import difflib
import sys

from seglake.cli.args import name_arg, number_arg
from seglake.cli.collections import (cmd_collections_describe, cmd_collections_drop, cmd_collections_list,
                                     cmd_demo_purge, cmd_demo_seed, cmd_segments_list, cmd_verify)
from seglake.cli.gc import cmd_gc_pause, cmd_gc_report, cmd_gc_run, cmd_gc_schedule
from seglake.cli.jobs import cmd_jobs_describe, cmd_jobs_limit, cmd_jobs_list
from seglake.cli.ops import cmd_cluster, cmd_config_show, cmd_stack
from seglake.cli.output import EXIT_REFUSED, fail
from seglake.cli.snapshots import (cmd_retention_clear, cmd_retention_list, cmd_retention_run, cmd_retention_set,
                                   cmd_retention_show, cmd_snapshots_create, cmd_snapshots_describe,
                                   cmd_snapshots_drop, cmd_snapshots_list, cmd_snapshots_pin, cmd_snapshots_pins,
                                   cmd_snapshots_unpin)
from seglake.cli.wal import add_wal_parsers


# what `demo seed`'s numbers mean; the keep counts of a retention policy (also `backup prune`, `milvus source set`)
_SEED_HELP = {"partitions": "partitions", "segments": "segments per partition", "rows": "rows per segment",
              "dim": "vector dimension", "shards": "shards (vchannels)"}
KEEP_HELP = {"last": "keep the newest N", "hourly": "keep the newest of each of the last N hours that have one",
             "daily": "keep the newest of each of the last N days that have one",
             "weekly": "keep the newest of each of the last N ISO weeks that have one",
             "monthly": "keep the newest of each of the last N months that have one"}


# -- parser ----------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    """argparse, but an unrecognised flag -- an abbreviation too -- is refused naming the
    closest option of the subcommand it was given to ("--tll-hours ... did you mean
    --ttl-hours?"), and every usage error leaves through `fail()` (exit 2, secrets masked)."""

    _argv: list[str] = []   # the command line being parsed (a subcommand's error() reads it)

    def __init__(self, *args, **kw):
        # no abbreviations: `--min-segment-row 5` was taken as --min-segment-rows, silently (a
        # prefix of two flags is refused, of one accepted: a typo then depends on the others)
        kw.setdefault("allow_abbrev", False)
        super().__init__(*args, **kw)

    def error(self, message: str):
        if not message.startswith("unrecognized arguments"):
            # argparse stops at a missing required argument before it looks at unknown flags:
            # a misspelt required flag (--as-off) is then said as missing; name the typo too
            hints = self.hints([a for a in Parser._argv if a.startswith("--")])
            if hints:
                message += "; " + "; ".join(hints)
        self.print_usage(sys.stderr)
        raise SystemExit(fail(self.prog, message, EXIT_REFUSED))

    def hints(self, args: list[str]) -> list[str]:
        """'--flag: did you mean --known?' for each of `args` that is not an option of this
        parser but close to one."""
        known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        hints = []
        for arg in args:
            flag = arg.split("=", 1)[0]
            if flag in known:
                continue
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6) if flag.startswith("-") else []
            if close:
                hints.append(f"{flag}: did you mean {close[0]}?")
        return hints

    def parse_args(self, args=None, namespace=None):
        Parser._argv = list(sys.argv[1:] if args is None else args)
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self.chosen(ns)
            hints = parser.hints(extras)
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
    p = Parser(prog="seglake", description="seglake: the lifecycle of a segment store (collections, snapshots, restores, GC, the WAL, backups) against the etcd and store of the current settings (`seglake config show`). `seglake COMMAND --help` describes a command.")
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument("--json", action="store_true", help="machine-readable output")
    common = argparse.ArgumentParser(add_help=False, parents=[out])
    common.add_argument("--db", default="default", type=db_t, help="database (default: default)")
    sub = p.add_subparsers(dest="group", required=True)

    demo = sub.add_parser("demo", help="demo data").add_subparsers(dest="action", required=True)
    seed = demo.add_parser("seed", parents=[common], help="create a demo collection with real segment files")
    seed.add_argument("--name", default="demo", type=coll_t, help="the collection to create (default demo)")
    for flag, default in (("partitions", 2), ("segments", 4), ("rows", 1000), ("dim", 16), ("shards", 2)):
        seed.add_argument(f"--{flag}", type=number_arg(f"demo_{flag}"), default=default,
                          help=f"{_SEED_HELP[flag]} (default {default})")
    seed.add_argument("--reset", action="store_true",
                      help="purge an existing demo collection of that name first (refused for other data)")
    seed.set_defaults(fn=cmd_demo_seed)
    purge = demo.add_parser("purge", parents=[common],
                            help="delete a demo collection's files and records (refused for any other "
                                 "collection, and while a snapshot or copy job uses it)")
    purge.add_argument("name", type=coll_t, help="the demo collection to delete")
    purge.set_defaults(fn=cmd_demo_purge)

    colls = sub.add_parser("collections", help="collections").add_subparsers(dest="action", required=True)
    cl = colls.add_parser("list", parents=[out], help="every collection with its segments, rows and bytes")
    cl.add_argument("--db", default=None, type=db_t, help="only this database")
    cl.add_argument("--all", action="store_true", help="include dropped collections")
    cl.set_defaults(fn=cmd_collections_list)
    cd = colls.add_parser("describe", parents=[common], help="one collection: schema, partitions, shards, totals")
    cd.add_argument("name", type=coll_t, help="the collection")
    cd.set_defaults(fn=cmd_collections_describe)
    cdr = colls.add_parser("drop", parents=[common],
                           help="drop a collection: Dropping, flush-and-drop by wal_flush, then Dropped "
                                "(files stay until GC's drop_tolerance; snapshots stay restorable)")
    cdr.add_argument("name", type=coll_t, help="the collection to drop")
    cdr.add_argument("--wait", action="store_true", help="wait until every vchannel is released, then finish")
    cdr.add_argument("--timeout-hours", type=number_arg("drop_timeout", HOUR), default=1.0,
                     help="with --wait: give up after this long (default 1)")
    cdr.add_argument("--yes", action="store_true", help="do not ask (required on a terminal)")
    cdr.set_defaults(fn=cmd_collections_drop)
    from seglake.cli.pitr import add_undrop_parser
    add_undrop_parser(colls, common, coll_t)

    segs = sub.add_parser("segments", help="segments").add_subparsers(dest="action", required=True)
    sl = segs.add_parser("list", parents=[common], help="a collection's segments: state, level, rows, files, "
                                                         "lineage")
    sl.add_argument("collection", type=coll_t, help="the collection")
    sl.add_argument("--state", choices=["Growing", "Sealed", "Flushed", "Importing", "Dropped"],
                    help="only segments in this state")
    sl.set_defaults(fn=cmd_segments_list)

    snaps = sub.add_parser("snapshots", help="snapshots").add_subparsers(dest="action", required=True)
    sn = snaps.add_parser("list", parents=[common], help="the COMMITTED snapshots (--all: every record)")
    sn.add_argument("--collection", default=None, type=coll_t, help="only this collection's snapshots")
    sn.add_argument("--all", action="store_true", help="include PENDING and DELETING records")
    sn.set_defaults(fn=cmd_snapshots_list)
    sd = snaps.add_parser("describe", parents=[common], help="one snapshot, its manifests checked")
    sd.add_argument("collection", type=coll_t, help="the snapshot's collection")
    sd.add_argument("name", type=snap_t, help="the snapshot")
    sd.set_defaults(fn=cmd_snapshots_describe)
    sc = snaps.add_parser("create", parents=[common], help="create inline (the DAG runs it on Spark)")
    sc.add_argument("collection", type=coll_t, help="the collection to snapshot")
    sc.add_argument("name", type=snap_t, help="the new snapshot's name")
    sc.add_argument("--description", default="", help="free text kept with the snapshot")
    sc.add_argument("--ttl-hours", type=number_arg("snapshot_ttl", HOUR), default=0,
                    help="GC drops the snapshot this many hours after it is created (default 0: kept until dropped)")
    sc.set_defaults(fn=cmd_snapshots_create)
    sx = snaps.add_parser("drop", parents=[common], help="drop a snapshot and its files (refused while pinned "
                                                         "or read by a restore)")
    sx.add_argument("collection", type=coll_t, help="the snapshot's collection")
    sx.add_argument("name", type=snap_t, help="the snapshot")
    sx.set_defaults(fn=cmd_snapshots_drop)
    sp = snaps.add_parser("pin", parents=[common], help="keep a snapshot (no drop, GC keeps its files) for a while")
    sp.add_argument("collection", type=coll_t, help="the snapshot's collection")
    sp.add_argument("name", type=snap_t, help="the snapshot")
    sp.add_argument("--ttl-hours", type=number_arg("pin_ttl", HOUR), required=True,
                    help="how long the pin holds (hours, fractions allowed; at most 8760)")
    sp.add_argument("--by", default="", help="who or what pinned it (shown in the list)")
    sp.set_defaults(fn=cmd_snapshots_pin)
    su = snaps.add_parser("unpin", parents=[out], help="remove a pin by its id")
    su.add_argument("pin_id", type=number_arg("pin_id"), help="the pin's id (`seglake snapshots pins`)")
    su.set_defaults(fn=cmd_snapshots_unpin)
    sps = snaps.add_parser("pins", parents=[common], help="list the unexpired pins")
    sps.add_argument("--collection", default=None, type=coll_t, help="only this collection's pins")
    sps.set_defaults(fn=cmd_snapshots_pins)

    jobs = sub.add_parser("jobs", help="copy-segment jobs").add_subparsers(dest="action", required=True)
    jl = jobs.add_parser("list", parents=[out], help="copy jobs (restores) with state and progress")
    jl.add_argument("--collection", default=None, type=coll_t,
                    help="jobs whose source or target is this collection")
    jl.set_defaults(fn=cmd_jobs_list)
    jd = jobs.add_parser("describe", parents=[out], help="one copy job: tasks, progress, rate, ETA")
    jd.add_argument("job_id", type=number_arg("id"), help="the job's id (`seglake jobs list`)")
    jd.add_argument("--watch", action="store_true", help="refresh until the job finishes")
    jd.add_argument("--interval", type=number_arg("poll_interval"), default=2.0,
                    help="with --watch: seconds between refreshes (default 2)")
    jd.set_defaults(fn=cmd_jobs_describe)
    jr = jobs.add_parser("limit", parents=[out], help="show or set the rate limit shared by ALL copy work of "
                                                       "this store (copy jobs, exports, imports); 0 0 removes it")
    jr.add_argument("--max-mib-per-second", type=number_arg("copy_max_bytes_per_second", 1 << 20), default=None,
                    help="the store's copy traffic, all runs together, at most this many MiB/s (0: unlimited)")
    jr.add_argument("--max-requests-per-second", type=number_arg("copy_max_requests_per_second"), default=None,
                    help="the store's copy requests, all runs together, at most this many per second (0: unlimited)")
    jr.set_defaults(fn=cmd_jobs_limit)

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
    gss.add_argument("--engine", choices=("auto", "spark", "inline"), default="auto",
                     help="where the mark runs (auto: inline below gc_inline_max_files referenced files)")
    gss.set_defaults(fn=cmd_gc_schedule)
    for action, text in (("show", "what a scheduled gc run does, set when and by whom"),
                         ("clear", "remove the record: scheduled gc runs are refused again")):
        gs.add_parser(action, parents=[common], help=text).set_defaults(fn=cmd_gc_schedule)
    for action, text in (("pause", "pause GC (whole store or one collection) with an etcd lease that expires"),
                         ("resume", "end a GC pause")):
        gp = g.add_parser(action, parents=[common], help=text)
        gp.add_argument("--collection", default=None, type=coll_t,
                        help="only this collection (default: the whole store)")
        if action == "pause":
            gp.add_argument("--ttl-hours", type=number_arg("gc_pause_ttl", HOUR), default=1.0,
                            help="the pause ends by itself after this many hours (default 1)")
            gp.add_argument("--reason", default="", help="free text shown with the pause")
        gp.set_defaults(fn=cmd_gc_pause)

    ret = sub.add_parser("retention", help="snapshot retention schedules (keep last / hourly / daily / "
                         "weekly / monthly)").add_subparsers(dest="action", required=True)
    rs = ret.add_parser("set", parents=[common], help="set a collection's policy (unset counts are 0)")
    rs.add_argument("collection", type=coll_t, help="the collection")
    for unit in ("last", "hourly", "daily", "weekly", "monthly"):
        rs.add_argument(f"--keep-{unit}", dest=f"keep_{unit}", type=number_arg("retention_keep"), default=None,
                        help=KEEP_HELP[unit])
    rs.add_argument("--export", action=argparse.BooleanOptionalAction, default=None,
                    help="also keep the schedule's snapshots as bundles in the backup target (backup_uri)")
    rs.add_argument("--archive", action=argparse.BooleanOptionalAction, default=None,
                    help="continuous backup: ship the collection's WAL to the backup target as it is written "
                         "(the wal_archive DAG, `seglake wal archive`)")
    rs.set_defaults(fn=cmd_retention_set)
    rsh = ret.add_parser("show", parents=[common], help="a collection's policy")
    rsh.add_argument("collection", type=coll_t, help="the collection")
    rsh.set_defaults(fn=cmd_retention_show)
    rc = ret.add_parser("clear", parents=[common], help="remove a collection's policy")
    rc.add_argument("collection", type=coll_t, help="the collection")
    rc.set_defaults(fn=cmd_retention_clear)
    rl = ret.add_parser("list", parents=[out], help="every policy")
    rl.set_defaults(fn=cmd_retention_list)
    rr = ret.add_parser("run", parents=[common], help="one schedule run now, inline (the snapshot_schedule DAG "
                                                      "runs it hourly)")
    rr.add_argument("--collection", default=None, type=coll_t, help="only this collection")
    rr.add_argument("--dry-run", action="store_true", help="list what would be created and pruned")
    rr.set_defaults(fn=cmd_retention_run)

    v = sub.add_parser("verify", parents=[common], help="check a collection's files inline (no Spark)")
    v.add_argument("collection", type=coll_t, help="the collection")
    v.set_defaults(fn=cmd_verify)

    cfg = sub.add_parser("config", help="configuration").add_subparsers(dest="action", required=True)
    cs = cfg.add_parser("show", parents=[out], help="the effective settings, secrets masked")
    cs.add_argument("--airflow", action="store_true",
                    help="resolve like a DAG run: + the Variable seglake_config and the Airflow connections")
    cs.set_defaults(fn=cmd_config_show)

    st = sub.add_parser("stack", help="the local etcd (make up/down/status)")
    st.add_argument("action", choices=["up", "down", "status"],
                    help="start / stop the etcd of $SEGLAKE_HOME/etcd on etcd_endpoint, or say whether it is up")
    st.set_defaults(fn=cmd_stack, json=False)
    cu = sub.add_parser("cluster", parents=[out],
                        help="the scale-out profile: 3 etcd members, SeaweedFS S3, Spark standalone master + "
                             "workers, on loopback (make cluster-up / cluster-down)")
    cu.add_argument("action", choices=["up", "down", "status", "env", "apps"],
                    help="apps: the Spark applications the master ran, with the workers their executors ran on")
    cu.add_argument("--since", default=None, help="apps: only applications after this app id")
    cu.add_argument("--base", default=None, help="state directory (default: $SEGLAKE_HOME/cluster)")
    cu.add_argument("--workers", type=number_arg("cluster_workers"), default=2, help="Spark workers (up, 1..4)")
    cu.add_argument("--timeout", type=number_arg("cluster_timeout"), default=300.0,
                    help="seconds to wait for every server to be healthy (up)")
    cu.set_defaults(fn=cmd_cluster)
    add_wal_parsers(sub, out, common)
    from seglake.cli.pitr import add_pitr_parsers, add_restore_database_parser
    add_pitr_parsers(sub, out, common, coll_t)
    add_restore_database_parser(sub, common)
    from seglake.cli.compaction import add_compaction_parsers
    add_compaction_parsers(sub, common, coll_t, number_arg)
    from seglake.cli.backup import add_backup_parsers
    add_backup_parsers(sub, snaps, common, coll_t, snap_t, number_arg)
    from seglake.cli.milvus import add_milvus_parsers
    add_milvus_parsers(sub, common, coll_t, snap_t, number_arg)
    return p
