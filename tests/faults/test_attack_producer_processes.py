"""Issue 26 items 2 and 3 across real OS processes (attack-producer): two live processes
sharing one producer id, concurrently; a call of hundreds of appends on two pchannels
SIGKILLed between append and ack at random points, then retried with its seq. Every
acknowledged call is modelled and the visible rows after a flush are compared with the
model row by row."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from fault_harness import kill_when
from seglake.lifecycle.flush import flush_pchannel
from seglake.meta import keys as keymod
from seglake.meta.catalog import pchannel_of
from seglake.meta.codec import decode
from seglake.visibility import visible_rows
from seglake.wal.client import WalClient, synthetic_rows

CHILD = Path(__file__).resolve().parent / "producer_child.py"
SCHEMA = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
          {"field_id": 101, "name": "vec", "dtype": "FloatVector", "dim": 4},
          {"field_id": 102, "name": "price", "dtype": "Float"}]


def _visible(meta, store, coll) -> list[tuple]:
    t = visible_rows(meta, store, coll.collection_id, columns=["price"])
    return sorted(zip(t.column("pk").to_pylist(), t.column("price").to_pylist()))


def _model(coll, calls: list[tuple[int, int]]) -> list[tuple]:
    out = []
    for first, n, seed in calls:
        t = synthetic_rows(coll, n, first, seed=seed)
        out += zip(t.column("pk").to_pylist(), t.column("price").to_pylist())
    return sorted(out)


def _flush(meta, store, settings, coll):
    for p in sorted({pchannel_of(v) for v in coll.vchannels}):
        flush_pchannel(meta, store, p, settings, flush_all=True)


def _start(spawn, settings, mode: str, args: dict):
    return spawn(mode, args, settings, argv=[sys.executable, str(CHILD), mode, json.dumps(args)])


def test_two_live_processes_sharing_one_producer_id_never_lose_or_duplicate_an_acknowledged_call(
        meta, store, settings, spawn, tmp_path):
    """Two OS processes, one producer id, 60 calls each at once; each fences the other
    back and forth (a fenced call is completed by a new client with err.result.seq)."""
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("shared", SCHEMA, shards=2)
    logs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    kids = [_start(spawn, settings, "share", {"collection": "shared", "pid": "one-id", "calls": 60,
                                              "base": base, "log": str(log)})
            for base, log in zip((1000, 100_000), logs)]
    outs = [k.wait(300) for k in kids]
    assert all(o.rc == 0 for o in outs), [o.err[-2000:] for o in outs]
    fenced = sum(o.result["fenced"] for o in outs)
    acked = [json.loads(line) for log in logs for line in log.read_text().splitlines()]
    assert len(acked) == 120
    _flush(meta, store, settings, coll)
    got = _visible(meta, store, coll)
    want = _model(coll, [(r["pks"][0], 2, r["pks"][0]) for r in acked])
    print(f"two processes, one id: {len(acked)} calls acknowledged, {fenced} fenced and completed, "
          f"{len(got)} rows visible for {len(want)} written")
    assert got == want


@pytest.mark.parametrize("seed", [1, 2])
def test_a_call_of_hundreds_of_appends_killed_between_append_and_ack_is_retried_exactly(
        meta, store, settings, spawn, seed):
    """Each call: 240 rows, one append per row, on 2 pchannels; the process is SIGKILLed
    when a random share of its appends has committed (read from the producer records),
    up to 3 times, then run again with the same seq until acknowledged."""
    rng = random.Random(seed)
    s = settings.replace(wal_fragment_records=8)
    with WalClient(meta, store, s) as c:
        coll = c.create_collection("big", SCHEMA, shards=2)
    pchannels = sorted({pchannel_of(v) for v in coll.vchannels})
    assert len(pchannels) == 2
    pid, rows, calls, kills = f"big-{seed}", 240, [], 0

    def committed(seq: int) -> float:
        n = 0
        for p in pchannels:
            kv = meta.kv.get(keymod.wal_producer(meta.keys, p, pid))
            if kv is not None:
                e = decode(kv.value, kv.key)["calls"].get(str(seq))
                n += sum(hi - lo + 1 for lo, hi in e["done"]) if e else 0
        return n / rows

    for k in range(4):
        seq, first = 1000 + k, 10_000 * (k + 1)
        args = {"collection": "big", "pid": pid, "seq": seq, "rows": rows, "first_pk": first}
        for _ in range(rng.randint(1, 3)):
            child = _start(spawn, s, "call", args)
            at = committed(seq) + rng.uniform(0.05, 0.5)
            if at >= 1.0:
                child.wait(120)
                break
            kill_when(child, lambda: committed(seq), at, timeout=120, poll=0.002)
            kills += 1
        out = _start(spawn, s, "call", args).wait(180)
        assert out.rc == 0, out.err[-3000:]
        again = _start(spawn, s, "call", args).wait(180)     # and once more: answered, nothing appended
        assert again.rc == 0 and again.result == out.result, again.err[-3000:]
        calls.append((first, rows, first))
    _flush(meta, store, s, coll)
    got = _visible(meta, store, coll)
    print(f"big calls: {len(calls)} calls x {rows} appends, {kills} SIGKILLs, {len(got)} rows visible")
    assert got == _model(coll, calls)


def test_a_zombie_holder_resumed_after_a_new_process_completed_its_call_appends_nothing(
        meta, store, settings, spawn):
    """A process is SIGSTOPped in the middle of a call of 240 appends on 2 pchannels
    (the zombie of a task that timed out); a new process with the same producer id runs
    the call again with its seq and completes it; the zombie is resumed (SIGCONT): it
    must append nothing more (fenced, or answered), and the rows are exact."""
    import os
    import signal
    import time

    s = settings.replace(wal_fragment_records=8)
    with WalClient(meta, store, s) as c:
        coll = c.create_collection("zombie", SCHEMA, shards=2)
    pchannels = sorted({pchannel_of(v) for v in coll.vchannels})
    args = {"collection": "zombie", "pid": "zombie-id", "seq": 77, "rows": 240, "first_pk": 1}

    def committed() -> float:
        n = 0
        for p in pchannels:
            kv = meta.kv.get(keymod.wal_producer(meta.keys, p, "zombie-id"))
            e = decode(kv.value, kv.key)["calls"].get("77") if kv is not None else None
            n += sum(hi - lo + 1 for lo, hi in e["done"]) if e else 0
        return n / 240

    zombie = _start(spawn, s, "call", args)
    deadline = time.time() + 120
    while committed() < 0.3 and time.time() < deadline and zombie.alive():
        time.sleep(0.002)
    os.killpg(zombie.pid, signal.SIGSTOP)
    at = committed()
    assert 0 < at < 1, at
    out = _start(spawn, s, "call", args).wait(180)
    assert out.rc == 0, out.err[-3000:]
    os.killpg(zombie.pid, signal.SIGCONT)
    z = zombie.wait(180)
    print(f"zombie stopped at {at:.0%}; resumed: rc {z.rc}; {z.err.strip().splitlines()[-1] if z.err.strip() else ''}")
    assert z.rc == 0 or "ProducerFenced" in z.err or "fenced" in z.err, z.err[-3000:]
    _flush(meta, store, s, coll)
    assert _visible(meta, store, coll) == _model(coll, [(1, 240, 1)])
