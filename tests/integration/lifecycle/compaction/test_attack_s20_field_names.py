"""Attack s20: a schema whose non-primary fields are named like visibility's key columns
(`pk` beside a primary `id`, `segment_id`, `partition_id`, `RowID`, `Timestamp`) is accepted
by the catalog and ingested, flushed and read like any other -- but compaction reads the
user columns through visibility.read_rows, which refuses those names: every compaction of
the collection fails (the scheduled run reports it forever)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from seglake.lifecycle import compaction
from seglake.lifecycle.flush import flush_pchannel
from seglake.visibility import visible_count
from seglake.wal.client import WalClient

from compaction_helpers import policy
from wal_helpers import pchannels

pytestmark = pytest.mark.etcd


@pytest.mark.parametrize("name", ["pk", "segment_id", "partition_id", "RowID", "Timestamp"])
def test_a_field_named_like_a_key_column_is_compacted(meta, store, settings, name):
    schema = [{"field_id": 100, "name": "id", "dtype": "Int64", "is_primary": True},
              {"field_id": 101, "name": name, "dtype": "Int64"},
              {"field_id": 102, "name": "vec", "dtype": "FloatVector", "dim": 2}]
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("fn", schema, shards=1)
    for i in range(3):
        pks = np.arange(10 * i, 10 * i + 10, dtype=np.int64)
        t = pa.table({"id": pks, name: pks * 7,
                      "vec": pa.FixedSizeListArray.from_arrays(pa.array(np.ones(20, np.float32)), 2)})
        with WalClient(meta, store, settings) as c:
            c.insert("fn", t)
            if i == 2:
                c.delete("fn", [1, 2, 3])
        for p in pchannels(coll):
            flush_pchannel(meta, store, p, settings, flush_all=True)
    n = visible_count(meta, store, coll.collection_id)
    assert n == 27
    s = compaction.compact(meta, store, "fn", policy(target_rows=10_000))
    assert s.results and all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
    assert visible_count(meta, store, coll.collection_id) == 27
