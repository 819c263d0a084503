"""Adversary s20 (issue 26 #4): no insert is acknowledged for a collection whose drop has
begun. Four clients insert one row per call while the drop begins; every acknowledged
insert's fragment must have been committed (its index record created) before the
collection record became Dropping. Real etcd."""

from __future__ import annotations

import threading
import time

from seglake.errors import SeglakeError
from seglake.lifecycle import drop
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.log import WalLog
from seglake.wal.message import MessageId

from wal_helpers import make_collection


def test_no_insert_is_acknowledged_after_the_drop_began(meta, store, settings, monkeypatch):
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, "d", shards=2)
    acked, stop, failures = [], threading.Event(), []
    lock = threading.Lock()

    def loop(k):
        with WalClient(meta, store, settings) as c:
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    res = c.insert("d", synthetic_rows(coll, 1, 1_000_000 * k + i))
                except SeglakeError as e:
                    with lock:
                        failures.append(repr(e)[:300])
                    continue
                with lock:
                    acked.extend((p, MessageId.parse(pos[1])) for p, pos in res.positions.items())

    dropping = {}
    real = drop._to_dropping

    def spy(meta_, coll_, clock):
        out = real(meta_, coll_, clock)
        dropping["rev"] = meta_.kv.get(meta_.keys.collection(coll_.collection_id)).mod_revision
        return out

    monkeypatch.setattr(drop, "_to_dropping", spy)
    ts = [threading.Thread(target=loop, args=(k,)) for k in range(1, 5)]
    for t in ts:
        t.start()
    t0 = time.time()
    while len(acked) < 40 and time.time() - t0 < 60:   # the drop begins while inserts are flowing
        time.sleep(0.05)
    drop.begin_drop(meta, store, settings, "d")
    time.sleep(1.5)
    stop.set()
    for t in ts:
        t.join(60)
    late = []
    for p, mid in acked:
        kv = meta.kv.get(WalLog(meta, None, p).frag_key(mid.fragment))
        if kv is not None and kv.create_revision > dropping["rev"]:
            late.append((p, str(mid), kv.create_revision))
    print("acknowledged", len(acked), "dropping at rev", dropping["rev"], "refused", len(failures), failures[:2])
    assert acked and not late, f"{len(late)} inserts acknowledged after the drop began (rev {dropping['rev']}): {late[:5]}"
