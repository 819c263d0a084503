"""Load tests/data/store_v1 (a store written before the row model, see
tests/data/make_store_v1.py) into a fresh etcd root and store directory.

    expected = load_store_v1(meta, store_dir)   # before any Meta/Store use of that root

- every etcd key of the dump is written under meta's root (the dump's keys are relative
  to its root; write markers were left out), in one ordered pass;
- the fixture's store tree (insert/delta/stats logs, index files, WAL fragments with the
  30 unflushed rows of wal_v1) is copied into `store_dir`, which must be the root of the
  local store the test opens (settings.store_uri);
- returns EXPECTED.json as a dict: per collection (demo_v1, wal_v1) its collection_id,
  visible_pks (as the old code meant them), visible_rows, rows_in_binlogs, and for
  wal_v1 `unflushed_pks` (in the WAL above the checkpoints, never flushed).
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

STORE_V1 = Path(__file__).resolve().parent / "data" / "store_v1"


def load_store_v1(meta, store_dir) -> dict:
    from seglake.meta.kv import Put

    dump = json.loads((STORE_V1 / "etcd.json").read_text())
    if meta.kv.count(meta.keys.prefix):
        raise RuntimeError(f"etcd root {meta.keys.root!r} is not empty: load the fixture into a fresh root")
    ops = []
    for kv in dump["kvs"]:
        value = kv["value"].encode() if "value" in kv else base64.b64decode(kv["value_b64"])
        ops.append(Put(meta.keys.prefix + kv["key"], value))
    meta.kv.write(ops)
    shutil.copytree(STORE_V1 / "store", Path(store_dir), dirs_exist_ok=True)
    return json.loads((STORE_V1 / "EXPECTED.json").read_text())
