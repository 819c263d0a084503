"""Attack s25: a delete hides an OLDER row of a pk while a NEWER row of the same pk lives
in another segment -- often the very segment that carries the delete (the flusher stores a
delete with the next segment it syncs, which holds the re-insert or the upsert's row).
Folds (l0_age 0) and merges, round after round on their own outputs, must drop the old row
and keep the new one (its row id and timestamp), in its partition: collection-wide and
partition-scoped deletes, upserts (the implied delete at the row's own timestamp), a pk
living in two partitions at once."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction

from compaction_helpers import Writer, exact, policy, rows

pytestmark = pytest.mark.etcd

FOLD = policy(target_rows=10_000, delete_ratio=0.0, l0_age=0.0)
MERGE = policy(target_rows=10_000, delete_ratio=0.0, l0_age=1e6)


@pytest.mark.parametrize("shards", [1, 2])
def test_the_newer_row_survives_every_fold_and_merge_of_the_delete_hiding_the_older(meta, store, settings, shards):
    w = Writer(meta, store, settings)
    w.create("nr", ["_default", "p1", "p2"], shards=shards)
    pks = [7, 8, 9, 10]
    w.insert("nr", pks, "p1", 1.0)
    w.insert("nr", pks, "p2", 1.5)                 # the same pks in another partition
    w.flush("nr")
    for rnd in range(6):
        v = 2.0 + rnd
        if rnd % 3 == 0:
            w.delete("nr", pks)                    # every partition, then a re-insert in one
            w.insert("nr", pks, "p1" if rnd % 2 else "p2", v)
        elif rnd % 3 == 1:
            w.insert("nr", pks[:2], "p1", v, upsert=True)      # scoped implied delete, row at its ts
            w.delete("nr", pks[2:], partition="p2")
            w.insert("nr", pks[2:], "p2", v + 0.25)
        else:
            w.insert("nr", pks, "_default", v)     # a third partition, nothing hidden
            w.delete("nr", pks[1:3], partition="p1")
        w.flush("nr")
        want = w.model.visible()
        assert rows(meta, store, "nr") == want, rnd
        for pol in (FOLD, MERGE, FOLD):
            before = exact(meta, store, "nr")
            s = compaction.compact(meta, store, "nr", pol)
            assert all(r.status == compaction.COMMITTED for r in s.results), s.results
            assert exact(meta, store, "nr") == before, (rnd, pol)
        assert rows(meta, store, "nr") == want, rnd
