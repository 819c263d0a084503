"""attack-s24-pitr: whole databases at many instants, from this store and from the backup
target alone, while names are dropped and reused. Three names; a random workload of
inserts, upserts and deletes, drops, re-creations of a dropped name, snapshots exported as
bundles, archive runs. At each instant the database held one collection per live name; the
set restored must be exactly those names (from the target: refused, naming it, when the
name's collection at the instant had no bundle at or before it), each equal to its model."""

from __future__ import annotations

import random
import time

import pytest

from seglake.errors import NotFound, SeglakeError
from seglake.lifecycle import pitr, retention, snapshot
from seglake.lifecycle.backup import archive
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.pitr.database import drive, plan_database, restore_database_as_of
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, drop_now, flush_all, rows, visible_of

quiet = dict(say=lambda line: None)
NAMES = ["a", "b", "c"]


@pytest.mark.parametrize("seed", range(2401, 2405))
def test_databases_at_many_instants_while_names_are_reused(meta, store, settings, tmp_path, seed):
    rnd = random.Random(seed)
    backup = LocalStore(tmp_path / "backup")
    live = {}          # name -> (incarnation number, Model, coll)
    life = []          # (name, inc, created_tick, dropped_tick or None, model)
    bundles = {}       # (name, inc) -> [consistent_ts]
    inc_of = {n: 0 for n in NAMES}
    instants = []
    v = 1.0

    def create(c, n):
        inc_of[n] += 1
        coll = c.create_collection(n, SCHEMA, shards=2)
        pitr.set_window(meta, n, "1h")
        retention.set_policy(meta, n, {"keep_last": 50, "archive": True})
        m = Model(meta, store, n)
        live[n] = (inc_of[n], m, coll)
        life.append([n, inc_of[n], coll.created_ts, None, m])

    with WalClient(meta, store, settings, batch_rows=5) as c:
        for n in NAMES:
            create(c, n)
        for step in range(16):
            v += 1.0
            op = rnd.choice(["w", "w", "w", "w", "bundle", "bundle", "bundle", "bundle", "drop", "recreate", "archive"])
            if op == "drop" and len(live) > 1:
                n = rnd.choice(sorted(live))
                inc = live.pop(n)[0]
                drop_now(meta, store, settings, n)
                for x in life:
                    if x[0] == n and x[1] == inc:
                        x[3] = meta.tso.reserve(1, linearizable=True)
                time.sleep(1.1)   # (past the drop's second of slack)
            elif op == "recreate" and len(live) < len(NAMES):
                create(c, rnd.choice([n for n in NAMES if n not in live]))
            elif op == "bundle" and live:
                n = rnd.choice(sorted(live))
                inc, m, coll = live[n]
                flush_all(meta, store, settings, coll)
                name = f"s{step}"
                snapshot.create(meta, store, n, name)
                exports.export(meta, store, backup, n, name, **quiet)
                rec = meta.snapshots.get(coll.collection_id, name)[0]
                bundles.setdefault((n, inc), []).append(rec.consistent_ts)
            elif op == "archive":
                archive.run(meta, store, backup)
            else:
                for n in sorted(live):
                    inc, m, coll = live[n]
                    pks = sorted(rnd.sample(range(1, 40), rnd.randint(1, 6)))
                    k = rnd.random()
                    if k < 0.5:
                        m.record(c.insert(n, rows(pks, v)), v)
                    elif k < 0.75:
                        m.record(c.insert(n, rows(pks, v), upsert=True), v)
                    else:
                        m.record(c.delete(n, pks), v)
            instants.append(meta.tso.reserve(1, linearizable=True))
    archive.run(meta, store, backup)

    def held(t):
        return {x[0]: x for x in life if x[2] <= t and (x[3] is None or x[3] > t)}

    checked = {"store": 0, "target": 0, "refused": 0, "rows": 0}
    for i, t in enumerate(instants):
        want = held(t)
        # from this store: exactly the names held at t
        ts, to, plans = plan_database(meta, store, "default", t, suffix=f"_h{i}")
        assert sorted(plans) == sorted(want), (i, sorted(plans), sorted(want))
        checked["store"] += 1
        # from the target: the names held at t, or refused naming one without a bundle at or before t
        unbundled = sorted(n for n, x in want.items() if not any(b <= t for b in bundles.get((n, x[1]), [])))
        try:
            ts, to, plans = plan_database(meta, store, "default", t, suffix=f"_t{i}", target=backup)
        except SeglakeError as e:
            assert unbundled and isinstance(e, NotFound) or unbundled and any(repr(n) in str(e) or f".{n} " in str(e) or f".{n}:" in str(e)
                                     for n in unbundled), (i, unbundled, str(e)[:400])
            checked["refused"] += 1
            continue
        assert not unbundled, (i, unbundled, sorted(plans), t, [(x[0], x[1], x[2], x[3]) for x in life],
                               {k: b for k, b in bundles.items()})
        assert sorted(plans) == sorted(want), (i, sorted(plans), sorted(want))
        checked["target"] += 1
        if i % 4 == 3:   # the rows, both ways, for some instants
            for where, kw, sfx in (("store", {}, f"_h{i}"), ("target", {"target": backup}, f"_t{i}")):
                jobs = restore_database_as_of(meta, store, "default", t, suffix=sfx, **kw)
                drive(meta, store, settings, jobs, "default")
                for n, x in want.items():
                    got = visible_of(meta, store, meta.catalog.get_by_name(f"{n}{sfx}"))
                    assert got == x[4].visible(t), (where, i, n)
                    checked["rows"] += sum(got.values())
    print("checked", checked, "life", [(x[0], x[1], x[3] is not None) for x in life])
