"""attack s22: etcd frozen (SIGSTOP) and killed while a producer appends (every call
retried with its own seq until acknowledged, as the client doc asks) and while the
flusher flushes: each acknowledged row is visible exactly once after the flush, nothing
unacknowledged appears twice, the log has no duplicate, every step failed cleanly."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from pathlib import Path

from fault_harness import assert_nothing_committed_twice

from seglake.errors import SeglakeError
from seglake.wal.client import WalClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "pitr"))
from pitr_model import SCHEMA, flush_all, rows, visible_of  # noqa: E402


def _outages(etcd, stop: threading.Event, log: list):
    plan = [("stop", 0.5, 3.0), ("kill", 1.5, 3.0), ("stop", 1.0, 2.5)]
    for mode, before, length in plan:
        if stop.wait(before):
            return
        log.append(mode)
        if mode == "kill":
            etcd.kill()
            time.sleep(length)
            etcd.restart()
        else:
            etcd.pause()
            time.sleep(length)
            etcd.resume()


def test_etcd_outages_while_a_producer_appends_and_the_flusher_flushes(etcd, fmeta, fstore, fsettings):
    settings = fsettings.replace(flush_seal_rows=40)
    acked: list[int] = []
    errors = Counter()
    with WalClient(fmeta, fstore, settings, producer_id="p-outage", batch_rows=5) as c:
        c.create_collection("w", SCHEMA, shards=2)
        stop, log = threading.Event(), []
        t = threading.Thread(target=_outages, args=(etcd, stop, log), daemon=True)
        t.start()
        deadline = time.time() + 60
        for i in range(40):
            pks = list(range(1000 + 10 * i, 1000 + 10 * i + 10))
            seq = None
            while True:
                assert time.time() < deadline, f"call {i} not acknowledged within 60 s"
                try:
                    c.insert("w", rows(pks, float(i)), seq=seq)
                    break
                except SeglakeError as e:
                    errors[type(e).__name__ + ("+seq" if getattr(e, "result", None) is not None else "")] += 1
                    got = getattr(getattr(e, "result", None), "seq", None)
                    seq = got if got is not None else seq
                    # no result: the call failed before it appended anything (client doc):
                    # retried as a new call; a duplicate below would prove otherwise
                    time.sleep(0.2)
            acked += pks
            time.sleep(0.25)
            if i == 20:   # the flusher runs (and meets outages) in the middle
                for _ in range(20):
                    try:
                        flush_all(fmeta, fstore, settings, fmeta.catalog.get_by_name("w"))
                        break
                    except SeglakeError as e:
                        errors["flush " + type(e).__name__] += 1
                        time.sleep(0.5)
        stop.set()
        t.join(30)
    print("outages:", log, "errors:", dict(errors))
    for _ in range(20):
        try:
            flush_all(fmeta, fstore, settings, fmeta.catalog.get_by_name("w"))
            break
        except SeglakeError as e:
            errors["flush " + type(e).__name__] += 1
            time.sleep(0.5)
    vis = visible_of(fmeta, fstore, fmeta.catalog.get_by_name("w"))
    pks_seen = Counter()
    for key, n in vis.items():
        pks_seen[key[0] if isinstance(key, tuple) else key] += n
    assert sorted(pks_seen) == sorted(acked), "acknowledged rows lost or unacknowledged rows visible"
    dup = {k: n for k, n in pks_seen.items() if n != 1}
    assert not dup, f"rows visible more than once: {list(dup.items())[:10]}"
    assert_nothing_committed_twice(fmeta, fstore)
