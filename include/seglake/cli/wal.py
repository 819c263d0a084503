"""Write-ahead log commands: ingest, delete, wal status, wal pause, wal archive."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from seglake.config import Settings
from seglake.errors import ValidationError
from seglake.cli.output import emit, open_meta_store
from seglake.progress import human_bytes


# -- write-ahead log (wal helper) -------------------------------------------------------
def cmd_ingest(args, s: Settings) -> int:
    """Append rows from a Parquet/Arrow file or --rows N synthetic rows through the WAL."""
    from seglake.wal.client import WalClient, check_count, synthetic_rows

    if (args.file is None) == (args.rows is None):
        raise ValidationError("give exactly one of --file PATH or --rows N")
    batch_rows = check_count("--batch-rows", args.batch_rows, maximum=1_000_000)
    seq = _retry_args(args)
    meta, store = open_meta_store(s)
    coll = meta.catalog.get_by_name(args.collection, args.db)
    coll.partition(args.partition)   # NotFound before any id is drawn (--rows allocates the pks)
    with WalClient(meta, store, s, batch_rows=batch_rows, producer_id=args.producer_id) as client, \
            _unnamed_hint(args):
        if args.rows is not None:   # after every check: the ids drawn are the first write
            n = check_count("--rows", args.rows, maximum=100_000_000)
            data = synthetic_rows(coll, n, meta.ids.allocate(n), seed=args.seed)
        else:
            data = _read_table(args.file)
        if not args.txn:
            res = client.insert(args.collection, data, partition=args.partition, db=args.db, seq=seq)
        else:   # a transaction spans one vchannel (as in Milvus): one per vchannel the rows route to
            pk = coll.schema.primary.name
            res = _per_vchannel(coll, data.column(pk).to_numpy(zero_copy_only=False),
                                lambda idx: client.insert(args.collection, data.take(idx), partition=args.partition,
                                                          db=args.db, txn=True))
    emit(args, res.to_json(), text=(f"appended {res.rows} rows to {res.collection!r} in {res.batches} batches"
                                    + (f" ({res.txns} transaction(s), one per vchannel)" if args.txn else "") + ": "
                                    + "; ".join(f"{p} {a} .. {b}" for p, (a, b) in sorted(res.positions.items()))))
    return 0


@contextlib.contextmanager
def _unnamed_hint(args):
    """A call of a run without --producer-id that failed halfway cannot be retried by
    another run: its error says so instead of only 'retry with seq=N'."""
    from seglake.wal.client import AppendIncomplete

    try:
        yield
    except AppendIncomplete as e:
        if args.producer_id is not None and args.rows is None:
            raise
        if args.producer_id is not None:   # --rows: new rows at every run
            err = AppendIncomplete(e.result, e.failed)
            err.args = (f"{e} -- but a --rows run makes new rows every time, so another run cannot retry it: "
                        "what committed stays; ingest a --file to be able to retry with --seq",)
            raise err from None
        err = AppendIncomplete(e.result, e.failed)
        err.args = (f"{e} -- this run had no --producer-id, so another run cannot retry it: what committed "
                    f"stays and a rerun appends it again; give --producer-id to runs you may have to retry",)
        raise err from None


def _retry_args(args) -> int | None:
    """--seq (a retry of a call, `seq=N` of its AppendIncomplete) needs --producer-id, the
    id of the run it retries (a run without one has a fresh id no other run knows), and
    is one call: not with --txn (one call per vchannel). Refused before anything."""
    if args.seq is None:
        return None
    if not re.fullmatch(r"[0-9]{1,19}", args.seq, re.ASCII):
        raise ValidationError(f"--seq must be a plain decimal integer (the seq=N of the error to retry), got "
                              f"{args.seq!r}")
    if args.producer_id is None:
        raise ValidationError("--seq retries a call of an earlier run: give that run's --producer-id too (a run "
                              "without one had a fresh id no other run knows: its calls cannot be told apart "
                              "from new ones). Nothing was appended")
    if args.txn:
        raise ValidationError("--seq cannot be used with --txn (one call per vchannel): retry a failed --txn "
                              "ingest as a new call. Nothing was appended")
    if args.rows is not None:
        raise ValidationError("--seq cannot be used with --rows: --rows makes new rows (new pks) at every run, so "
                              "a retry would be another payload; retry an ingest of --file PATH (the same file). "
                              "Nothing was appended")
    return int(args.seq)


def _per_vchannel(coll, pks, call):
    """`call(indices)` once per vchannel the primary keys `pks` route to, each call one
    transaction; the results summed. When one fails after others committed, the error
    names the vchannels whose transactions committed (they stay: each is atomic alone)."""
    import numpy as np

    from seglake.errors import SeglakeError
    from seglake.wal.client import IngestResult, route

    shards = route(np.asarray(pks, dtype=np.int64), coll.shards)
    total, done = IngestResult(coll.name), []
    for j, v in enumerate(coll.vchannels):
        idx = np.nonzero(shards == j)[0]
        if not len(idx):
            continue
        try:
            r = call(idx)
        except SeglakeError as e:
            if not done:
                raise
            from seglake.cli.output import REFUSED
            kind = next((k for k in REFUSED if isinstance(e, k)), SeglakeError)   # keeps the exit code
            raise kind(f"{e} (the transactions on {', '.join(done)} committed before it)") from None
        done.append(v)
        total.rows += r.rows
        total.deletes += r.deletes
        total.batches += r.batches
        total.txns += r.txns
        total.pchannels = sorted(set(total.pchannels) | set(r.pchannels))
        for p, (first, last) in r.positions.items():
            total.positions[p] = [total.positions.get(p, [first])[0], last]
        for p, n in r.committed.items():
            total.committed[p] = total.committed.get(p, 0) + n
    return total


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
    seq = _retry_args(args)
    meta, store = open_meta_store(s)
    with WalClient(meta, store, s, producer_id=args.producer_id) as client, _unnamed_hint(args):
        if not args.txn:
            res = client.delete(args.collection, pks, db=args.db, seq=seq)
        else:   # one transaction per vchannel the keys route to
            coll = meta.catalog.get_by_name(args.collection, args.db)
            res = _per_vchannel(coll, pks, lambda idx: client.delete(args.collection, [pks[i] for i in idx],
                                                                      db=args.db, txn=True))
    emit(args, res.to_json(), text=f"appended deletes of {res.deletes} primary keys to {res.collection!r}"
                                   + (f" ({res.txns} transaction(s), one per vchannel)" if args.txn else ""))
    return 0


def cmd_wal_status(args, s: Settings) -> int:
    from seglake.wal.client import wal_status

    from seglake.progress import tick_time

    from seglake.lifecycle import pitr

    meta, _ = open_meta_store(s)
    rows = wal_status(meta, args.pchannel)
    cost = pitr.cost(meta)   # what the point-in-time windows hold
    table_rows = []
    for r in rows:
        held = cost["pchannels"].get(r["pchannel"])
        r["pitr"] = None if held is None else {
            **held, "windows": [{k: w[k] for k in ("collection", "db", "window", "snapshot", "snapshot_bytes")}
                                for w in cost["windows"] if r["pchannel"] in w["fragments_from"]]}
        table_rows.append({**r, "size": human_bytes(r["bytes"]), "last tick (UTC)": tick_time(r["last_time_tick"]),
                           "checkpoint lag": _lags(r["consumers"]),
                           "txns": ",".join(f"{t['txn_id']}@{t['vchannel']}" for t in r["open_txns"]) or "-",
                           "pitr hold": "-" if held is None else
                           f"from #{held['held_from_fragment']}: {human_bytes(held['log_bytes'])} "
                           f"({human_bytes(held['window_only_bytes'])} below the checkpoints)"})
    emit(args, rows, table_rows, ["pchannel", "term", "writer", "last tick (UTC)", "fragments", "size", "paused",
                                  "checkpoint lag", "txns", "pitr hold"])
    if not args.json and cost["windows"]:
        print(f"point-in-time windows hold {human_bytes(cost['log_bytes'])} of log "
              f"({human_bytes(cost['window_only_bytes'])} only for them) and "
              f"{human_bytes(cost['snapshot_bytes'])} of base snapshots: "
              + "; ".join(f"{w['db']}.{w['collection']} {w['window']} from "
                          + (w["snapshot"] or ("its creation" if w.get("restorable_from_ts") is not None else
                                               "its creation (nothing restorable yet: it needs a snapshot)"))
                          for w in cost["windows"]))
    if not args.json and cost.get("restores"):
        print("restores to a time in flight hold their log: " + "; ".join(
            f"{w['db']}.{w['collection']} into {w['restore']} from fragment(s) "
            + ", ".join(f"{p} #{n}" for p, n in w["fragments_from"].items()) for w in cost["restores"]))
    if not args.json:
        from seglake.lifecycle.backup import archive
        arch = archive.status(meta)
        if arch:
            print("\nWAL archive (continuous backup):")
            for a in arch:
                print(f"  {a['pchannel']} ({', '.join(a['collections'])}): fragment {a['shipped']} of {a['last']} "
                      f"shipped to {a['target'] or '-'}"
                      + (f"; {a['behind']} behind, the oldest {a['lag_s']:g} s old" if a["behind"] else "; up to date"))
    return 0


def cmd_wal_archive(args, s: Settings) -> int:
    """Ship the archived pchannels' new fragments to the backup target (once, or for --seconds)."""
    import sys

    from seglake.lifecycle.backup import archive
    from seglake.lifecycle.backup import bundle as bundles

    meta, store = open_meta_store(s)
    target = bundles.open_target(s, args.target)
    r = archive.run(meta, store, target, seconds=args.seconds, move=args.move,
                    max_bytes_per_second=(args.max_mib_per_second or 0) * (1 << 20),
                    say=lambda line: print(line, file=sys.stderr, flush=True))
    emit(args, r, text=f"archived {r['fragments']} fragment(s) ({human_bytes(r['bytes'])}) of "
                       f"{len(r['pchannels'])} pchannel(s) to {r['target']}"
                       + "".join(f"\n  {p}: shipped up to {d['cursor']} of {d['last']}" for p, d in r["pchannels"].items()))
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
    meta, _ = open_meta_store(s)
    set_pause(meta, args.pchannel, args.action == "pause", getattr(args, "reason", ""))
    print(f"WAL consumption {'paused' if args.action == 'pause' else 'resumed'} for "
          f"{args.pchannel or 'every pchannel'}")
    return 0


def _retry_parsers(p) -> None:
    from seglake.cli.args import producer_id_arg

    p.add_argument("--producer-id", default=None, type=producer_id_arg,
                   help="name this run's producer (1..64 of A-Za-z0-9._-), so that a later run can retry its "
                        "call: a failed run's error says seq=N; rerun the same command with --seq N")
    p.add_argument("--seq", default=None,
                   help="retry the call seq=N of an earlier run with the same --producer-id and the same "
                        "rows: only what did not commit is appended")


def add_wal_parsers(sub, out, common) -> None:
    from seglake.cli.args import number_arg

    ing = sub.add_parser("ingest", parents=[common], help="append rows through the write-ahead log")
    from seglake.cli.args import name_arg

    ing.add_argument("collection", type=name_arg("collection"),
                     help="the collection (fed through its vchannels' pchannels)")
    ing.add_argument("--file", default=None, help="Parquet or Arrow IPC file whose columns match the schema")
    ing.add_argument("--rows", type=number_arg("ingest_rows"), default=None,
                     help="append N synthetic rows (at most 100000000)")
    ing.add_argument("--partition", default="_default", type=name_arg("partition"), help="the partition the rows go to (default _default)")
    ing.add_argument("--batch-rows", type=number_arg("ingest_batch_rows"), default=10000,
                     help="rows per WAL insert message (default 10000, at most 1000000)")
    ing.add_argument("--seed", type=number_arg("ingest_seed"), default=0,
                     help="with --rows: the random seed of the synthetic rows (0 .. 4294967295)")
    ing.add_argument("--txn", action="store_true", help="one transaction per vchannel")
    _retry_parsers(ing)
    ing.set_defaults(fn=cmd_ingest)
    de = sub.add_parser("delete", parents=[common], help="append deletes by primary key through the WAL")
    de.add_argument("collection", type=name_arg("collection"), help="the collection")
    de.add_argument("--pks", required=True, help="comma-separated primary keys")
    de.add_argument("--txn", action="store_true", help="one transaction per vchannel")
    _retry_parsers(de)
    de.set_defaults(fn=cmd_delete)
    w = sub.add_parser("wal", help="write-ahead log").add_subparsers(dest="action", required=True)
    ws = w.add_parser("status", parents=[out], help="per pchannel: term, writer, ticks, fragments, pause, lag")
    ws.add_argument("--pchannel", default=None, help="only this pchannel (e.g. seglake-dml_3)")
    ws.set_defaults(fn=cmd_wal_status)
    wa = w.add_parser("archive", parents=[out], help="continuous backup: ship the WAL of every collection whose "
                      "retention policy says --archive to the backup target")
    wa.add_argument("--target", default=None, help="backup target URI (default: config key backup_uri)")
    wa.add_argument("--seconds", type=number_arg("archive_seconds"), default=0,
                    help="keep shipping new fragments for this long (default 0: once)")
    wa.add_argument("--max-mib-per-second", type=number_arg("copy_max_bytes_per_second", 1 << 20), default=0,
                    help="ship at most this many MiB/s (default 0: unlimited)")
    wa.add_argument("--move", action="store_true", help="move the archive to --target for good (it starts again "
                                                         "there from the log's first retained fragment)")
    wa.set_defaults(fn=cmd_wal_archive)
    for action in ("pause", "resume"):
        wp = w.add_parser(action, help=f"{action} consumption (recovery scanners are never paused)")
        wp.add_argument("--pchannel", default=None, help="this pchannel (e.g. seglake-dml_3); or --all")
        wp.add_argument("--all", action="store_true", help="the global flag")
        if action == "pause":
            wp.add_argument("--reason", default="", help="free text shown by `seglake wal status`")
        wp.set_defaults(fn=cmd_wal_pause, json=False)
