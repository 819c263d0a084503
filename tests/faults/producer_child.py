"""A WAL producer in its own OS process, for tests/faults/test_attack_producer_processes.py.

    python producer_child.py MODE JSON_ARGS      (settings from the environment)

- share:  `calls` calls of 2 rows each (pks base + 10*i, +1) under the producer id
  `pid`; after each acknowledgement one JSON line {"i", "seq", "pks", "positions"} is
  appended to `log` (fsynced). ProducerFenced (another process claimed the id): the call
  is retried with seq=err.result.seq from a new client, which claims the id again (so two
  such processes fence each other back and forth), after a random back-off that grows with
  the fences met (without it two such processes can fence each other for ever), until
  acknowledged.
- call:   ONE call of rows first_pk .. first_pk + rows - 1 (batch_rows 1: one append per
  row) under `pid` with `seq`; prints {"positions"} when acknowledged. The test SIGKILLs
  it at random points and runs it again with the same seq.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time


def main() -> int:
    mode, a = sys.argv[1], json.loads(sys.argv[2])
    from seglake.config import Settings
    from seglake.errors import SeglakeError
    from seglake.meta import Meta
    from seglake.storage import open_store
    from seglake.wal.client import WalClient, synthetic_rows
    from seglake.wal.producers import ProducerFenced

    settings = Settings.load()
    with Meta.from_settings(settings) as meta:
        store = open_store(settings)
        coll = meta.catalog.get_by_name(a["collection"])
        if mode == "call":
            rows = synthetic_rows(coll, a["rows"], a["first_pk"], seed=a["first_pk"])
            with WalClient(meta, store, settings, producer_id=a["pid"], batch_rows=1) as c:
                res = c.insert(a["collection"], rows, seq=a["seq"])
            print(json.dumps({"positions": res.positions}))
            return 0
        fenced = 0
        c = WalClient(meta, store, settings, producer_id=a["pid"])
        try:
            for i in range(a["calls"]):
                first = a["base"] + 10 * i
                rows = synthetic_rows(coll, 2, first, seed=first)
                seq, streak = None, 0
                while True:
                    try:
                        res = c.insert(a["collection"], rows, seq=seq)
                        break
                    except ProducerFenced as e:
                        fenced += 1
                        streak += 1
                        seq = e.result.seq
                        c.close()
                        # back off before claiming the id again, as a client should: two processes
                        # re-claiming at once can fence each other for ever. The wait grows with
                        # this call's fences until it is longer than a call takes (on a loaded
                        # machine a cap of 0.5 s still fenced for 300 s: calls took longer)
                        time.sleep(random.uniform(0, min(8.0, 0.01 * 2 ** min(streak, 10))))
                        c = WalClient(meta, store, settings, producer_id=a["pid"])
                    except SeglakeError as e:   # AppendIncomplete and the like: retry with the call's seq
                        seq = getattr(getattr(e, "result", None), "seq", None) or seq
                        if seq is None:
                            raise
                with open(a["log"], "a") as f:
                    f.write(json.dumps({"i": i, "seq": res.seq, "pks": [first, first + 1],
                                        "positions": res.positions}) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
        finally:
            c.close()
        print(json.dumps({"fenced": fenced}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
