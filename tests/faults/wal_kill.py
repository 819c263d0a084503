"""Actors and the row-exact audit of the WAL kill loop (test_wal_kill_loop.py).

    python wal_kill.py producer JSON_ARGS    # settings from the environment
    python wal_kill.py flusher JSON_ARGS

Producer: random inserts / upserts / deletes (some in a transaction) on one collection,
pks drawn from a pool every producer shares (overlapping pks), each call with the
producer's fixed id and an explicit sequence number (= the op number). Before a call the
op is written to `p{i}.intent` (fsynced); only after the call RETURNED is `p{i}.ack`
appended (ids, fsynced). A failed call is retried with the same seq until it returns; a
call the WAL refuses (ValidationError: a txn call whose first attempt was cut) is
recorded as abandoned. Restarted after a SIGKILL, a producer retries its last
unacknowledged op with the same seq, or (with probability `abandon`) abandons it.

Every row carries `val` = (producer + 1) * 10**12 + op * 1000 + row, unique; every delete
carries a marker pk per vchannel (never inserted): so each message in the log names the
op it belongs to.

The audit (`audit()`): the committed log (raw fragments, ticks as committed, txns
resolved by their commit as the row model says) is matched against the intents: every
acknowledged op is in it exactly once at the ids the call returned, every other op at
most once, nothing else is in it; ticks rise strictly in log order; an op acknowledged
before another began has smaller ticks (one global TSO). The visible rows (pk, val,
partition, Timestamp) must equal the rule applied to that log, row by row.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

POOL = 120                   # shared pks 1..POOL
MARKER_BASE = 10**15         # delete markers: never inserted
PARTITIONS = ["_default", "p1"]
DIM = 2


def schema() -> list[dict]:
    return [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
            {"field_id": 101, "name": "val", "dtype": "Int64"},
            {"field_id": 102, "name": "embedding", "dtype": "FloatVector", "dim": DIM}]


def val_of(idx: int, op: int, row: int) -> int:
    return (idx + 1) * 10**12 + op * 1000 + row


def op_of_val(val: int) -> tuple[int, int]:
    return val // 10**12 - 1, (val // 1000) % 10**9


def marker(idx: int, op: int, shard: int, shards: int) -> int:
    import numpy as np

    from seglake.wal.client import route
    base = MARKER_BASE + (idx * 10**7 + op) * 64
    cand = np.arange(base, base + 64, dtype=np.int64)
    return int(cand[route(cand, shards) == shard][0])


def op_of_marker(m: int) -> tuple[int, int]:
    k = (m - MARKER_BASE) // 64
    return k // 10**7, k % 10**7


# -- files -----------------------------------------------------------------------------------
def append_line(path: Path, rec: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_lines(path: Path) -> list[dict]:
    """Every complete record (a torn last line from a SIGKILL is dropped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def _clean(path: Path) -> list[dict]:
    recs = read_lines(path)
    if path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in recs))
        os.replace(tmp, path)
    return recs


# -- producer --------------------------------------------------------------------------------
def _new_op(rng: random.Random, idx: int, op: int, shards: int, pool_by_shard: list[list[int]],
            txn_rate: float) -> dict:
    kind = rng.choices(["insert", "upsert", "delete"], [5, 3, 2])[0]
    txn = rng.random() < txn_rate
    shard = rng.randrange(shards)
    pool = pool_by_shard[shard] if txn else list(range(1, POOL + 1))
    n = rng.randint(1, 6)
    pks = [rng.choice(pool) for _ in range(n)]
    part = rng.choice(PARTITIONS)
    rec = {"op": op, "kind": kind, "txn": txn, "pks": pks}
    if kind == "delete":
        rec["partition"] = part if rng.random() < 0.4 else None
        rec["markers"] = [marker(idx, op, shard, shards)] if txn else \
            [marker(idx, op, s, shards) for s in range(shards)]
    else:
        rec["partition"] = part
        rec["vals"] = [val_of(idx, op, i) for i in range(n)]
    return rec


def _call(client, coll, name: str, rec: dict, seq: int):
    import numpy as np
    import pyarrow as pa

    from seglake.wal import message as M
    if rec["kind"] == "delete":
        return client.delete(name, rec["pks"] + rec["markers"], partition=rec["partition"], txn=rec["txn"], seq=seq)
    n = len(rec["pks"])
    emb = pa.FixedSizeListArray.from_arrays(pa.array(np.full(n * DIM, 0.5, dtype=np.float32)), DIM)
    table = pa.table({"pk": pa.array(rec["pks"], pa.int64()), "val": pa.array(rec["vals"], pa.int64()),
                      "embedding": emb}, schema=M.arrow_schema(coll.schema))
    fn = client.upsert if rec["kind"] == "upsert" else client.insert
    return fn(name, table, partition=rec["partition"], txn=rec["txn"], seq=seq)


def producer(meta, store, settings, a: dict) -> dict:
    import numpy as np

    from seglake.errors import ValidationError
    from seglake.wal.client import WalClient, route

    d, idx = Path(a["dir"]), a["idx"]
    intent_path, ack_path, stop = d / f"p{idx}.intent", d / f"p{idx}.ack", d / "stop"
    intents, acks = _clean(intent_path), _clean(ack_path)
    acked = {r["op"] for r in acks}
    abandoned = {r["abandon"] for r in intents if "abandon" in r}
    ops = [r for r in intents if "op" in r]
    rng = random.Random(f"{a['seed']}-{idx}-{len(ops)}-{os.getpid()}")
    skew = [0.0]
    clock = (lambda: time.time() + skew[0]) if a.get("skew") else time.time
    name = a["collection"]
    coll = meta.catalog.get_by_name(name)
    shards = coll.shards
    pool = np.arange(1, POOL + 1, dtype=np.int64)
    sh = route(pool, shards)
    pool_by_shard = [[int(x) for x in pool[sh == s]] for s in range(shards)]
    pending = ops[-1] if ops and ops[-1]["op"] not in acked and ops[-1]["op"] not in abandoned else None
    if pending is not None and rng.random() < a.get("abandon", 0.0):
        append_line(intent_path, {"abandon": pending["op"], "why": "restart"})
        pending = None
    next_op = (ops[-1]["op"] + 1) if ops else 1
    done = retries = refused = 0
    with WalClient(meta, store, settings, producer_id=a["producer_id"], clock=clock) as client:
        while True:
            if pending is None:
                if stop.exists():
                    break
                if a.get("skew"):   # clock phases: right, +1h, right, -1h
                    skew[0] = [0.0, 3600.0, 0.0, -3600.0][(next_op // 40) % 4]
                pending = _new_op(rng, idx, next_op, shards, pool_by_shard, a.get("txn_rate", 0.15))
                pending["t"] = time.monotonic()
                pending["skew"] = skew[0]
                append_line(intent_path, pending)
                next_op += 1
            try:
                res = _call(client, coll, name, pending, seq=pending["op"])
            except ValidationError as e:   # refused whole: a txn whose first attempt was cut
                append_line(intent_path, {"abandon": pending["op"], "why": f"refused: {e}"})
                refused += 1
                pending = None
                continue
            except Exception as e:  # noqa: BLE001 - retried with the same seq
                retries += 1
                print(f"retry op {pending['op']}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr, flush=True)
                time.sleep(0.05)
                continue
            append_line(ack_path, {"op": pending["op"], "positions": res.positions, "t": time.monotonic()})
            done += 1
            pending = None
            time.sleep(rng.uniform(0, a.get("pause", 0.02)))
    return {"done": done, "retries": retries, "refused": refused}


# -- flusher ---------------------------------------------------------------------------------
def flusher(meta, store, settings, a: dict) -> dict:
    from seglake.errors import SeglakeError
    from seglake.lifecycle.flush import flush_pchannel
    from seglake.wal.log import Fenced

    d = Path(a["dir"])
    rng = random.Random(f"{a.get('seed')}-{os.getpid()}")
    runs = fenced = 0
    errors: Counter = Counter()
    while not (d / "stop").exists():
        ps = list(a["pchannels"])
        rng.shuffle(ps)
        for p in ps:
            try:
                flush_pchannel(meta, store, p, settings, flush_all=rng.random() < 0.15,
                               max_seconds=rng.choice([None, None, 0.3, 1.0]))
                runs += 1
            except Fenced:
                fenced += 1
            except SeglakeError as e:
                errors[type(e).__name__] += 1
                print(f"flush {p}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr, flush=True)
        with open(d / "flusher.runs", "a") as f:
            f.write(f"{os.getpid()} {runs} {fenced}\n")
        time.sleep(rng.uniform(0, 0.2))
    return {"runs": runs, "fenced": fenced, "errors": dict(errors)}


def main() -> int:
    role, args = sys.argv[1], json.loads(sys.argv[2])
    from seglake.config import Settings
    from seglake.errors import SeglakeError
    from seglake.meta import Meta
    from seglake.storage import open_store

    from seglake.errors import Unavailable

    settings = Settings.load()
    deadline = time.monotonic() + 60
    while True:   # etcd unavailable (a loaded machine: "no leader") = a restart of the actor
        try:
            with Meta.from_settings(settings) as meta:
                result = {"producer": producer, "flusher": flusher}[role](meta, open_store(settings), settings, args)
            break
        except Unavailable as e:
            print(f"restart {role}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            if time.monotonic() > deadline:
                return 3
            time.sleep(0.5)
        except SeglakeError as e:
            print(f"SeglakeError {type(e).__name__}: {e}", file=sys.stderr)
            return 3
    print(json.dumps(result, default=str))
    return 0


# -- the audit -------------------------------------------------------------------------------
def committed_log(meta, store, coll):
    """Per pchannel of `coll`: (raw messages in log order, effective data events).
    An event: (kind, vchannel, msg id, tick, payload) for Insert ("rows": pks, vals,
    partition, upsert) and Delete ("dels": pks, partition scope); txn bodies only when
    their txn committed, at the commit's tick - k + i (the row model, wal/txn.py)."""
    from seglake.meta.catalog import pchannel_of
    from seglake.wal import message as M
    from seglake.wal.log import WalLog

    out = {}
    for p in sorted({pchannel_of(v) for v in coll.vchannels}):
        raw = list(WalLog(meta, store, p).messages())
        events, open_txns = [], {}

        def event(m, tick):
            if m.collection_id != coll.collection_id:
                return None
            if m.type == M.INSERT:
                return ("rows", m.vchannel, m.id, tick, {
                    "pks": m.body.column("pk").to_pylist(), "vals": m.body.column("val").to_pylist(),
                    "partition": m.partition_id, "upsert": bool(m.props.get("upsert")),
                    "upsert_ts": m.props.get("upsert_ts")})
            if m.type == M.DELETE:
                return ("dels", m.vchannel, m.id, tick, {"pks": m.body.column("pk").to_pylist(),
                                                        "partition": m.partition_id,
                                                        "upsert_ts": m.props.get("upsert_ts")})
            return None
        for m in raw:
            if m.type == M.BEGIN_TXN:
                open_txns[(m.producer, m.txn_id)] = []
            elif m.type == M.COMMIT_TXN:
                body = open_txns.pop((m.producer, m.txn_id), None)
                if body is not None:
                    first = m.time_tick - len(body)
                    events += [e for e in (event(b, first + i) for i, b in enumerate(body)) if e]
            elif m.type == M.ROLLBACK_TXN:
                open_txns.pop((m.producer, m.txn_id), None)
            elif m.txn_id:
                if (m.producer, m.txn_id) in open_txns:
                    open_txns[(m.producer, m.txn_id)].append(m)
            else:
                e = event(m, m.time_tick)
                if e:
                    events.append(e)
        out[p] = (raw, events)
    return out


def audit(meta, store, coll, d: Path, producers: int) -> dict:
    """Row-exact audit (module docstring). Returns counts; raises AssertionError with
    every problem found."""
    import numpy as np

    from seglake.visibility import visible_rows
    from seglake.wal.message import MessageId

    problems: list[str] = []
    part_id = {p.name: p.partition_id for p in coll.partitions}
    intents, acks, abandoned = {}, {}, set()
    for i in range(producers):
        for r in read_lines(d / f"p{i}.intent"):
            if "abandon" in r:
                abandoned.add((i, r["abandon"]))
            else:
                intents[(i, r["op"])] = r
        for r in read_lines(d / f"p{i}.ack"):
            acks[(i, r["op"])] = r
    logs = committed_log(meta, store, coll)

    # ticks strictly rise in log order on every pchannel
    for p, (raw, _) in logs.items():
        ticks = [m.time_tick for m in raw]
        bad = [k for k in range(1, len(ticks)) if ticks[k] <= ticks[k - 1]]
        if bad:
            problems.append(f"{p}: ticks do not rise at {len(bad)} places, first at {raw[bad[0]].id}: "
                            f"{ticks[bad[0] - 1]} -> {ticks[bad[0]]}")

    # attribute every effective message to the op it belongs to
    seen_vals: Counter = Counter()
    seen_markers: Counter = Counter()
    op_ticks: dict = defaultdict(list)
    op_ids: dict = defaultdict(list)
    rows, dels = [], []
    for p, (_, events) in logs.items():
        for kind, v, mid, tick, body in events:
            if kind == "rows":
                owners = {op_of_val(x) for x in body["vals"]}
                seen_vals.update(body["vals"])
                # an upsert: its rows and its delete at the call's one timestamp (issue 26), at or
                # below its tick
                dts = min(tick, body["upsert_ts"]) if body["upsert"] and body.get("upsert_ts") else tick
                rows += [(pk, val, body["partition"], dts) for pk, val in zip(body["pks"], body["vals"])]
                if body["upsert"]:
                    dels += [(pk, dts, body["partition"]) for pk in body["pks"]]
            else:
                ms = [x for x in body["pks"] if x >= MARKER_BASE]
                owners = {op_of_marker(x) for x in ms}
                seen_markers.update(ms)
                dts = min(tick, body["upsert_ts"]) if body.get("upsert_ts") else tick   # the call's one ts
                dels += [(pk, dts, body["partition"]) for pk in body["pks"]]
            if len(owners) != 1:
                problems.append(f"{p} message {mid}: belongs to {len(owners)} ops {sorted(owners)[:4]}")
                continue
            (owner,) = owners
            rec = intents.get(owner)
            if rec is None:
                problems.append(f"{p} message {mid}: op {owner} was never called")
                continue
            op_ticks[owner].append(tick)
            op_ids[owner].append((p, mid))
            # the message holds exactly the op's rows of this vchannel
            mine = [k for k, x in enumerate(rec["pks"] + rec.get("markers", []))
                    if v == _vchannel_of(coll, x)]
            if kind == "rows":
                want = sorted((rec["pks"][k], rec["vals"][k]) for k in mine)
                got = sorted(zip(body["pks"], body["vals"]))
                want_part = part_id[rec["partition"]]
                if body["upsert"] != (rec["kind"] == "upsert"):
                    problems.append(f"op {owner}: upsert flag {body['upsert']} for a {rec['kind']}")
            else:
                allk = rec["pks"] + rec["markers"]
                want, got = sorted(allk[k] for k in mine), sorted(body["pks"])
                want_part = 0 if rec["partition"] is None else part_id[rec["partition"]]
            if want != got or body["partition"] != want_part:
                problems.append(f"op {owner} on {v}: message {mid} holds {got[:6]} part {body['partition']}, "
                                f"the op's share is {want[:6]} part {want_part}")
    dup_vals = [x for x, n in seen_vals.items() if n > 1]
    dup_markers = [x for x, n in seen_markers.items() if n > 1]
    if dup_vals:
        problems.append(f"{len(dup_vals)} rows committed twice, e.g. ops {sorted({op_of_val(x) for x in dup_vals})[:5]} "
                        f"(acked: {sum(op_of_val(x) in acks for x in dup_vals)})")
    if dup_markers:
        problems.append(f"{len(dup_markers)} deletes committed twice, e.g. ops "
                        f"{sorted({op_of_marker(x) for x in dup_markers})[:5]}")

    # every acknowledged op is in the log, whole, at the ids its call returned
    lost = []
    for key, ack in acks.items():
        rec = intents.get(key)
        if rec is None:
            problems.append(f"op {key} acknowledged but never intended")
            continue
        need = rec.get("vals") or []
        have = all(seen_vals[x] == 1 for x in need) and all(seen_markers[x] == 1 for x in rec.get("markers", []))
        if not have:
            lost.append(key)
            continue
        for p, mid in op_ids[key]:
            pos = ack["positions"].get(p)
            if pos is None or mid < MessageId.parse(pos[0]) or MessageId.parse(pos[1]) < mid:
                problems.append(f"op {key}: its message on {p} is {mid}, the call returned {pos}")
    if lost:
        problems.append(f"{len(lost)} acknowledged ops not (whole) in the log, e.g. {sorted(lost)[:5]}")

    # linearizable: an op acknowledged before another began has smaller ticks
    done = sorted((acks[k]["t"], max(op_ticks[k]), k) for k in acks if op_ticks.get(k))
    if done:
        ack_t = np.array([x[0] for x in done])
        pref = np.maximum.accumulate(np.array([x[1] for x in done], dtype=np.int64))
        viol = []
        for k in acks:
            if not op_ticks.get(k):
                continue
            j = np.searchsorted(ack_t, intents[k]["t"], side="left") - 1
            if j >= 0 and pref[j] >= min(op_ticks[k]):
                viol.append(k)
        if viol:
            problems.append(f"{len(viol)} ops got ticks below an op acknowledged before they began, e.g. {viol[:5]}")

    # the visible rows are the rule applied to the committed log, row by row
    dp = np.array([x[0] for x in dels], dtype=np.int64)
    dt = np.array([x[1] for x in dels], dtype=np.int64)
    dpart = np.array([x[2] for x in dels], dtype=np.int64)
    order = np.argsort(dp, kind="stable")
    dp, dt, dpart = dp[order], dt[order], dpart[order]
    expected = Counter()
    for pk, val, part, tick in rows:
        lo, hi = np.searchsorted(dp, pk, "left"), np.searchsorted(dp, pk, "right")
        hidden = bool(np.any((dt[lo:hi] > tick) & ((dpart[lo:hi] == 0) | (dpart[lo:hi] == part))))
        if not hidden:
            expected[(pk, val, part, tick)] += 1
    t = visible_rows(meta, store, coll.collection_id, columns=["val"])
    actual = Counter(zip(t.column("pk").to_pylist(), t.column("val").to_pylist(),
                         t.column("partition_id").to_pylist(), t.column("Timestamp").to_pylist()))
    missing, extra = expected - actual, actual - expected
    if missing or extra:
        problems.append(f"visible rows differ from the model: {sum(missing.values())} missing "
                        f"{sorted(missing)[:4]}, {sum(extra.values())} extra {sorted(extra)[:4]}")
    stats = {"intended": len(intents), "acked": len(acks), "abandoned": len(abandoned),
             "unacked_in_log": sum(1 for k in op_ticks if k not in acks),
             "log_messages": sum(len(r) for r, _ in logs.values()), "rows_committed": len(rows),
             "deletes_committed": len(dels), "visible": t.num_rows,
             "txn_ops_acked": sum(1 for k in acks if intents.get(k, {}).get("txn"))}
    assert not problems, "WAL audit failed:\n  " + "\n  ".join(problems) + f"\n{stats}"
    return stats


_VCH: dict = {}


def _vchannel_of(coll, pk: int) -> str:
    import numpy as np

    from seglake.wal.client import route
    key = (tuple(coll.vchannels), pk)   # (collection ids repeat across tests' etcd roots)
    if key not in _VCH:
        _VCH[key] = coll.vchannels[int(route(np.array([pk], dtype=np.int64), coll.shards)[0])]
    return _VCH[key]


if __name__ == "__main__":
    sys.exit(main())
