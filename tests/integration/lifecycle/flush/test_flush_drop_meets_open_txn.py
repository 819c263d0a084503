"""A DropCollection meeting an open transaction on the same pchannel, crashed at every
flusher step: exactly-once for what stays, nothing written for what a drop released.

Set-up: collections `a` (16 shards) and `b` share pchannel P through vchannels va and
vb. One raw writer on P appends, in a scenario's order, a txn on vb (Begin, bodies
carrying earlier ids than their commit), plain inserts and deletes on va and vb, and
the DropCollection of va (or of vb) while the txn is open. Flusher runs happen between
the appends, so vb's checkpoint is computed from positions taken while the txn was
open. Each case is replayed once per crash point: the N-th flusher hook call (any of
after_files, after_commit, drop_synced, after_release, across every run) raises; the
abandoned flusher is followed by a recovery run from the minimum checkpoint, and the
scenario goes on. The final state must be the same at every N:
- every acknowledged row of b (plain rows, committed txn bodies) is in b's Flushed
  segments exactly once, every acknowledged delete in their delta logs once, nothing
  from a rolled back, expired or refused txn;
- for a released vchannel: no checkpoint, no Flushed/Growing/Sealed segment, and its
  Dropped segments hold the rows acknowledged before its DropCollection, each once.
"""

from __future__ import annotations

import time
import uuid

import pytest

from seglake.errors import SeglakeError
from seglake.lifecycle import drop
from seglake.lifecycle.flush import Flusher
from seglake.wal.checkpoints import RELEASED, read_checkpoint
from seglake.lifecycle.verify import segment_rows
from seglake.meta.catalog import pchannel_of
from seglake.meta.segments import DROPPED, FLUSHED
from seglake.wal import message as M
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.message import Message
from seglake.wal.log import WalLog
from seglake.errors import ValidationError
from seglake.wal.writer import WalWriter

from wal_helpers import DEFAULT_PARTITION, make_collection, schema

HOOKS = ("after_files", "after_commit", "drop_synced", "release_batch", "after_release")
TXN = 9001


class Crash(Exception):
    """The flusher process dies here (nothing after it runs; etcd and files stay)."""


class World:
    """A fresh etcd root and store, the two collections and a raw writer on P."""

    def __init__(self, etcd_server, tmp_path, crash_at: int | None):
        from seglake.config import Settings
        from seglake.meta import Meta
        from seglake.storage import open_store

        root = f"t{uuid.uuid4().hex[:10]}"
        self.settings = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": root,
                                            "store_uri": str(tmp_path / root), "etcd_timeout": 5})
        self.meta, self.store = Meta.from_settings(self.settings), open_store(self.settings)
        with WalClient(self.meta, self.store, self.settings) as c:
            self.a = c.create_collection("a", schema(), shards=16, partitions=[DEFAULT_PARTITION, "p2"])
            self.b = make_collection(c, "b", shards=16)
        self.p = pchannel_of(self.b.vchannels[0])
        self.va = next(v for v in self.a.vchannels if pchannel_of(v) == self.p)
        self.vb = self.b.vchannels[0]
        self.w = WalWriter.open(self.meta, self.store, self.p, self.settings)
        self.crash_at, self.calls, self.crashed = crash_at, 0, 0
        self.acked = {"a": [], "b": []}       # rows acknowledged (txn bodies once committed)
        self.deleted = {"a": [], "b": []}
        self.txn_rows: dict[int, tuple[str, list]] = {}
        self.dropped: set[str] = set()         # collections whose DropCollection is acknowledged
        self.refused: list[str] = []

    def close(self) -> None:
        self.w.close()
        self.meta.close()

    # -- appends ------------------------------------------------------------------------------
    def _coll(self, name):
        return self.a if name == "a" else self.b

    def _v(self, name):
        return self.va if name == "a" else self.vb

    def insert(self, name: str, first: int, n: int, txn: int = 0, part: int = 0) -> None:
        coll = self._coll(name)
        batch = M.conform_batch(synthetic_rows(coll, n, first).to_batches()[0], coll.schema)
        self.w.append(Message.insert(self._v(name), coll.collection_id, coll.partitions[part].partition_id,
                                     batch, txn_id=txn))
        pks = list(range(first, first + n))
        if txn:
            self.txn_rows[txn][1].extend(pks)
        elif name not in self.dropped:
            self.acked[name] += pks

    def delete(self, name: str, pks: list[int]) -> None:
        coll = self._coll(name)
        self.w.append(Message.delete(self._v(name), coll.collection_id, pks, [0] * len(pks)))
        self.deleted[name] += pks

    def begin(self, name: str, txn: int = TXN, keepalive_ms: int = 3_600_000) -> None:
        self.txn_rows[txn] = (name, [])
        self.w.append(Message.begin_txn(self._v(name), txn, keepalive_ms))

    def commit(self, txn: int = TXN) -> None:
        """A commit the writer acknowledges makes its rows acknowledged, unless the
        vchannel was released before it (the drop came first in the log: they go with it)."""
        name, rows = self.txn_rows[txn]
        try:
            self.w.append(Message.commit_txn(self._v(name), txn))
        except SeglakeError as e:
            self.refused.append(f"commit {txn}: {e}")
            return
        if name not in self.dropped:
            self.acked[name] += rows

    def rollback(self, txn: int = TXN) -> None:
        name, _ = self.txn_rows[txn]
        self.w.append(Message.rollback_txn(self._v(name), txn))

    def drop_msg(self, name: str) -> None:
        """Created -> Dropping and the DropCollection on this pchannel's vchannel,
        through the same writer (the txn on the other vchannel stays open)."""
        coll = self._coll(name)
        drop._to_dropping(self.meta, coll, time.time)
        self.w.append(Message(M.DROP_COLLECTION, self._v(name), collection_id=coll.collection_id,
                              props={"name": coll.name}))
        self.dropped.add(name)

    def real_drop(self, name: str) -> None:
        """The operator's path: `begin_drop` appends through its own writer, which takes
        a new term on P and fences ours (a failover: every open txn of ours is ended).
        Our writer is then reopened, as a client retrying after Fenced would."""
        drop.begin_drop(self.meta, self.store, self.settings, name)
        self.dropped.add(name)
        self.w.close()
        self.w = WalWriter.open(self.meta, self.store, self.p, self.settings)

    # -- flusher runs with a crash point ----------------------------------------------------------
    def _hook(self, _flusher, **_kw):
        self.calls += 1
        if self.calls == self.crash_at:
            self.crashed += 1
            raise Crash(f"crash at hook call {self.calls}")

    def flush(self, flush_all: bool = False) -> None:
        hooks = {h: self._hook for h in HOOKS}
        try:
            Flusher(self.meta, self.store, self.p, self.settings, hooks=hooks).run(flush_all=flush_all)
        except Crash:
            # recovery: a new flusher (new term) from the minimum checkpoint
            Flusher(self.meta, self.store, self.p, self.settings, hooks=hooks).run(flush_all=flush_all)

    # -- the end state ------------------------------------------------------------------------------
    def check(self) -> None:
        for _ in range(2):   # converged: a further run changes nothing
            self.flush(flush_all=True)
        for name in ("a", "b"):
            coll, v = self._coll(name), self._v(name)
            segs = [s for s in self.meta.segments.list(coll.collection_id) if s.channel == v]
            if name in self.dropped:
                assert v in self.meta.catalog.get(coll.collection_id).properties.get(RELEASED, ())
                assert read_checkpoint(self.meta, v)[0] is None
                assert {s.state for s in segs} <= {DROPPED}
                states = [DROPPED]
            else:
                # a killed run's Growing records become Dropped (no files: rows are replayed)
                assert all(s.state == FLUSHED or (s.state == DROPPED and not s.binlogs) for s in segs)
                states = [FLUSHED]
            pks, dels = segment_rows(self.meta, self.store, coll.collection_id, states)
            assert pks == sorted(self.acked[name]), f"{name}: rows not exactly once (crash at {self.crash_at})"
            assert dels == sorted(self.deleted[name]), f"{name}: deletes not exactly once (crash at {self.crash_at})"


# -- scenarios: DropCollection of a (or b) while a txn on b (or a) is open ----------------------------
def commit_after_drop(w: World) -> None:
    w.insert("a", 1, 10)
    w.insert("b", 1, 10)
    w.begin("b")
    w.insert("b", 1001, 5, txn=TXN)
    w.insert("a", 11, 10)
    w.insert("b", 11, 10)
    w.flush(flush_all=True)                # b's checkpoint from positions taken inside the txn
    w.delete("b", [2, 12])
    w.insert("b", 1006, 5, txn=TXN)
    w.insert("a", 21, 10)
    w.delete("a", [3])
    w.drop_msg("a")
    w.insert("b", 21, 10)
    w.flush()                              # the drop of va with the txn still open
    w.commit()
    w.insert("b", 31, 10)
    w.flush()


def commit_before_drop(w: World) -> None:
    w.insert("a", 1, 10)
    w.begin("b")
    w.insert("b", 1001, 5, txn=TXN)
    w.insert("b", 1, 10)
    w.flush(flush_all=True)
    w.commit()
    w.insert("a", 11, 10)
    w.drop_msg("a")
    w.insert("b", 11, 10)
    w.flush()
    w.flush(flush_all=True)


def rollback_after_drop(w: World) -> None:
    w.insert("a", 1, 10)
    w.insert("b", 1, 10)
    w.begin("b")
    w.insert("b", 1001, 5, txn=TXN)
    w.flush(flush_all=True)
    w.insert("a", 11, 10)
    w.drop_msg("a")
    w.insert("b", 11, 10)
    w.flush()
    w.rollback()
    w.insert("b", 21, 10)
    w.flush()


def expired_after_drop(w: World) -> None:
    w.insert("a", 1, 10)
    w.insert("b", 1, 10)
    w.begin("b", keepalive_ms=300)
    w.insert("b", 1001, 5, txn=TXN)
    w.flush(flush_all=True)
    w.drop_msg("a")
    w.insert("b", 11, 10)
    w.flush()
    time.sleep(0.4)
    w.commit()                             # past the keepalive: refused, never acknowledged
    assert w.refused
    w.insert("b", 21, 10)
    w.flush()


def two_txns_two_vchannels(w: World) -> None:
    w.insert("a", 1, 10)
    w.begin("b", TXN)
    w.begin("a", TXN + 1)
    w.insert("b", 1001, 5, txn=TXN)
    w.insert("a", 1001, 5, txn=TXN + 1)
    w.insert("b", 1, 10)
    w.flush(flush_all=True)
    w.commit(TXN + 1)                      # a's txn commits before a's drop: its rows go with a
    w.drop_msg("a")
    w.insert("b", 11, 10)
    w.flush()
    w.commit(TXN)                          # a txn spans one vchannel: a's drop leaves b's alone
    assert not w.refused
    w.insert("b", 21, 10)
    w.flush()


def drop_of_the_txn_vchannel(w: World) -> None:
    w.insert("a", 1, 10)
    w.insert("b", 1, 10)
    w.begin("b")
    w.insert("b", 1001, 5, txn=TXN)
    w.flush(flush_all=True)
    w.insert("b", 11, 10)
    w.delete("b", [3])
    w.drop_msg("b")                        # b's own drop while its txn is open
    w.insert("a", 11, 10)
    w.flush()
    w.commit()                             # after b's drop: refused, never acknowledged
    assert w.refused
    w.insert("a", 21, 10)
    w.flush()


def retry_after_the_drop_fenced_the_writer(w: World) -> None:
    """The client lost its producer (reopened after a's drop): the commit on the new
    producer is refused (the txn is not its own), the client retries the whole txn
    under the same id there. A txn is named by producer and id: the first attempt's
    bodies are never committed, only the retry's rows land (once)."""
    w.insert("a", 1, 10)
    w.insert("b", 1, 10)
    w.begin("b")
    w.insert("b", 1001, 5, txn=TXN)
    w.flush(flush_all=True)
    w.real_drop("a")
    w.commit()                             # refused: begun under the fenced term
    assert w.refused
    w.begin("b")                           # the retry, same txn id
    w.insert("b", 1001, 5, txn=TXN)
    w.commit()
    w.insert("b", 11, 10)
    w.flush()


def real_drop_of_the_txn_vchannel(w: World) -> None:
    """b's own drop through `begin_drop` while b's txn is open: the drop's writer fences
    the txn's, so the commit is refused (never acknowledged), and b's rows from before
    the drop are in its Dropped segments once."""
    w.insert("a", 1, 10)
    w.insert("b", 1, 10)
    w.begin("b")
    w.insert("b", 1001, 5, txn=TXN)
    w.flush(flush_all=True)
    w.insert("b", 11, 10)
    w.delete("b", [3])
    w.real_drop("b")
    w.commit()
    assert w.refused
    w.insert("a", 11, 10)
    w.flush()


SCENARIOS = [retry_after_the_drop_fenced_the_writer, real_drop_of_the_txn_vchannel, commit_after_drop, commit_before_drop, rollback_after_drop, expired_after_drop,
             two_txns_two_vchannels, drop_of_the_txn_vchannel]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_a_drop_beside_an_open_txn_is_exactly_once_at_every_crash_point(etcd_server, tmp_path, scenario):
    _every_crash_point(etcd_server, tmp_path, scenario)


def drop_released_in_batches(w: World, *, until_drop: bool = False) -> None:
    """The release of va takes several txns (more segments than one etcd txn holds; the
    batch is 2 here). The open txn on vb holds va's checkpoint back before its Begin,
    so a crash between two batches replays every row of va since then: a partition
    whose segments a first batch already marked Dropped must still skip them (its
    rows are in those segments), or the replayed drop writes them again."""
    w.insert("b", 1, 10)
    w.begin("b")
    w.insert("b", 1001, 5, txn=TXN)
    w.insert("a", 1, 10, part=0)
    w.insert("a", 101, 10, part=1)
    w.flush(flush_all=True)
    w.insert("a", 11, 10, part=0)
    w.insert("a", 111, 10, part=1)
    w.flush(flush_all=True)
    w.insert("a", 21, 10, part=0)
    w.drop_msg("a")
    if until_drop:
        return
    w.flush()
    w.commit()
    w.insert("b", 11, 10)
    w.flush()


FLUSH_ONCE = """
from seglake.config import Settings
from seglake.lifecycle import flush
from seglake.meta import Meta
from seglake.storage import open_store
import sys
from seglake.lifecycle.flush import flusher as flusher_mod
flusher_mod.RELEASE_BATCH = 2
s = Settings.load()
flush.flush_pchannel(Meta.from_settings(s), open_store(s), sys.argv[1], s)
"""


def test_a_flusher_sigkilled_between_release_batches_never_writes_dropped_rows_twice(etcd_server, tmp_path,
                                                                                      monkeypatch):
    """The same cut by a real SIGKILL of a flusher process (fault point
    flush.release_batch:kill after the 2nd batch), then a recovery run here."""
    import os
    import subprocess
    import sys

    from seglake.lifecycle.flush import flusher as flusher_mod
    monkeypatch.setattr(flusher_mod, "RELEASE_BATCH", 2)
    w = World(etcd_server, tmp_path, crash_at=None)
    try:
        drop_released_in_batches(w, until_drop=True)
        env = {**os.environ, **w.settings.to_env(), "PYTHONPATH": os.pathsep.join(sys.path),
               "SEGLAKE_FAULTS": "flush.release_batch:kill@2"}
        proc = subprocess.run([sys.executable, "-c", FLUSH_ONCE, w.p], env=env, timeout=120)
        assert proc.returncode == -9
        segs = [s for s in w.meta.segments.list(w.a.collection_id) if s.channel == w.va]
        assert {s.state for s in segs} == {DROPPED, FLUSHED}     # cut between two batches
        w.flush()
        w.commit()
        w.insert("b", 11, 10)
        w.flush()
        w.check()
    finally:
        w.close()


def test_a_drop_released_in_several_txns_is_exactly_once_at_every_crash_point(etcd_server, tmp_path,
                                                                              monkeypatch):
    from seglake.lifecycle.flush import flusher as flusher_mod
    monkeypatch.setattr(flusher_mod, "RELEASE_BATCH", 2)
    _every_crash_point(etcd_server, tmp_path, drop_released_in_batches)


def _every_crash_point(etcd_server, tmp_path, scenario) -> None:
    n, points = 0, []
    while True:
        w = World(etcd_server, tmp_path, crash_at=n or None)
        try:
            scenario(w)
            w.check()
            if n and not w.crashed:
                break                      # past the last hook call: every step was crashed once
            points.append(n)
        finally:
            w.close()
        n += 1
    print(f"{scenario.__name__}: {len(points) - 1} crash points")
    assert len(points) >= 5, points        # no crash + at least the four kinds of step


def test_an_unrelated_drop_neither_ends_nor_holds_back_an_open_txn(etcd_server, tmp_path):
    """Issue 17 #4/#7: a's drop (through its own producer) never disturbs b's open txn:
    the txn commits afterwards; b's checkpoint waits for b's txn only, and moves past
    the drop once it commits."""
    w = World(etcd_server, tmp_path, crash_at=None)
    try:
        w.insert("b", 1, 10)
        w.begin("b")
        w.insert("b", 1001, 5, txn=TXN)
        w.flush(flush_all=True)
        before = read_checkpoint(w.meta, w.vb)[0]
        drop.begin_drop(w.meta, w.store, w.settings, "a")
        w.dropped.add("a")
        drop_tt = WalLog(w.meta, w.store, w.p).state().last_tt
        w.insert("b", 11, 10)
        w.flush(flush_all=True)
        assert read_checkpoint(w.meta, w.vb)[0].time_tick < drop_tt   # held by b's own txn
        w.commit()
        assert not w.refused
        w.flush(flush_all=True)
        cp = read_checkpoint(w.meta, w.vb)[0]
        assert cp.time_tick > drop_tt > before.time_tick
        w.check()
    finally:
        w.close()


def test_a_txn_body_on_another_vchannel_is_refused(etcd_server, tmp_path):
    """A transaction spans one vchannel (as in Milvus): a body for another one is
    refused before anything is appended; the txn itself goes on."""
    w = World(etcd_server, tmp_path, crash_at=None)
    try:
        w.insert("b", 1, 10)
        w.begin("b")
        w.insert("b", 1001, 5, txn=TXN)
        with pytest.raises(ValidationError, match="spans one vchannel"):
            w.insert("a", 2001, 5, txn=TXN)
        w.commit()
        w.check()
    finally:
        w.close()
