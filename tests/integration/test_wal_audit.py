"""Adversarial audit of the shared WAL (h5-audit): edges of the producer API."""

from __future__ import annotations

import pytest

from seglake.lifecycle.flush import flush_pchannel
from seglake.visibility import visible_rows
from seglake.wal.client import WalClient, synthetic_rows

from wal_helpers import make_collection, pchannels


def _flush(meta, store, settings, coll):
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)


def _pks(meta, store, coll):
    return sorted(visible_rows(meta, store, coll.collection_id).column("pk").to_pylist())


def test_a_new_client_reusing_a_producer_id_never_answers_a_new_call_from_an_old_one(meta, store, settings):
    with WalClient(meta, store, settings, producer_id="job-1") as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 10, 1))
    with WalClient(meta, store, settings, producer_id="job-1") as c:   # a new process, same id, no seq
        c.insert("c1", synthetic_rows(coll, 10, 11))
    _flush(meta, store, settings, coll)
    assert _pks(meta, store, coll) == list(range(1, 21))

