"""Crash safety: SIGKILL a writer process in the middle of thousands of appends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from seglake.storage import layout
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.log import WalLog, decode_fragment

from wal_helpers import all_messages, inserted_pks, make_collection, pchannels

WRITER = r"""
import sys
from seglake.config import Settings
from seglake.meta import Meta
from seglake.storage import open_store
from seglake.wal.client import WalClient, synthetic_rows
s = Settings.load()
meta, store = Meta.from_settings(s), open_store(s)
coll = meta.catalog.get_by_name("c1")
with WalClient(meta, store, s) as c:
    for i in range(1, 100000):
        c.insert("c1", synthetic_rows(coll, 10, i * 10))
        print(i, flush=True)   # acknowledged: committed and durable
"""


@pytest.mark.parametrize("backend, batches", [("local", 1000), ("s3", 300)])
def test_sigkill_mid_append_keeps_every_acknowledged_batch(backend, batches, meta, store, settings, request):
    if backend == "s3":
        server = request.getfixturevalue("s3_server")
        store = request.getfixturevalue("s3_store")
        settings = settings.replace(store_uri=store.uri, s3_endpoint=server.endpoint,
                                    s3_access_key=server.access_key, s3_secret_key=server.secret_key)
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=2)
    env = {**os.environ, **settings.to_env(), "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", WRITER], env=env, stdout=subprocess.PIPE, text=True)
    acked = 0
    deadline = time.time() + 900   # a hang guard, not a speed bound: the kill comes after `batches` acks
    try:
        while acked < batches and time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked = int(line)
    finally:
        proc.send_signal(signal.SIGKILL)
        rest = proc.stdout.read()  # lines written before the kill are acknowledged too
        proc.wait(10)
    acked = max([acked] + [int(x) for x in rest.split()])
    assert acked >= batches, f"writer acknowledged only {acked} batches"

    # reopen: a new writer takes the next term, readers see a consistent log
    with WalClient(meta, store, settings) as c:
        c.insert("c1", synthetic_rows(coll, 1, 10**9))
    pks = set()
    for p in pchannels(coll):
        msgs = all_messages(meta, store, p, settings)
        pks |= set(inserted_pks(msgs))
        log = WalLog(meta, store, p)
        # every committed fragment decodes and matches its index; an uncommitted file
        # (if any) is not in the log
        for rec in log.fragments():
            log.read_fragment(rec)
            decode_fragment(rec.key, store.get(rec.key))
    batches = {pk // 10 for pk in pks if pk < 10**9}
    assert set(range(1, acked + 1)) <= batches            # every acknowledged batch
    for b in batches:                                       # nothing half visible
        assert {b * 10 + j for j in range(10)} <= pks
