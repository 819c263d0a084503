"""s21 adversary: a record of caller numbers shrunk to its floor by expire_producers is
not enforced at commit. A live writer that still holds the call in memory (a
partly committed multi-append call) commits the call's missing append after the shrink:
the record then remembers the call with only that append done, and a retry of the whole
call appends its first append a second time. Real etcd."""

from __future__ import annotations

import pytest

from seglake.errors import ValidationError
from seglake.meta.alloc import compose_ts, physical_ms
from seglake.wal import writer as W
from seglake.wal.client import AppendIncomplete, WalClient, synthetic_rows
from seglake.wal.log import expire_producers
from seglake.wal.producers import INDEX_MASK

from wal_helpers import all_messages, inserted_pks, make_collection, pchannels, wide, wide_meta  # noqa: F401 (fixtures)


def test_a_partly_committed_caller_numbered_call_is_never_appended_twice_after_the_shrink(meta, store, wide,
                                                                                            monkeypatch):
    with WalClient(meta, store, wide) as c0:
        coll = make_collection(c0, "c", shards=1)
    (p,) = pchannels(coll)
    rows = synthetic_rows(coll, 2, 1)          # batch_rows=1: call 7 is two appends on p
    real = W.WalWriter.append_async
    armed = {"on": True}

    def flaky(self, msgs, *, seq=None, digest=None):   # the second append never commits (etcd away)
        if armed["on"] and seq is not None and seq & INDEX_MASK == 1:
            r = W._Request([], [], 0, seq)
            r.finish(error=W.Retry("injected: not committed"))
            return r
        return real(self, msgs, seq=seq, digest=digest)

    monkeypatch.setattr(W.WalWriter, "append_async", flaky)
    acked = False
    c1 = WalClient(meta, store, wide, producer_id="ops", batch_rows=1)
    with pytest.raises(AppendIncomplete) as ei:
        c1.insert("c", rows, seq=7)
    assert ei.value.result.committed == {p: 1}
    armed["on"] = False
    # two windows idle: the record of caller numbers is shrunk to its floor (7)
    later = compose_ts(physical_ms(meta.tso.now()) + 121_000 + 1000)
    assert expire_producers(meta, p, now_tt=later) == 1
    for client in (c1, WalClient(meta, store, wide, producer_id="ops", batch_rows=1)):
        try:   # the README: "its retry stays refused for good"; answered would be fine too
            client.insert("c", rows, seq=7)
            acked = True
        except (ValidationError, AppendIncomplete):
            pass
        client.close()
    pks = sorted(inserted_pks(all_messages(meta, store, p, wide)))
    assert pks == ([1, 2] if acked else [1]), f"acked={acked} pks={pks}"
