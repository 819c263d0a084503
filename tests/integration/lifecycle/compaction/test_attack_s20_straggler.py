"""Attack s20: a straggler run of a unit (a Spark task retried, a second driver) passes the
'output id free' check, then another run of the same unit commits, then the straggler
writes the output's files again (same keys) and loses its commit. The committed segment's
files must still be exactly what its record says (size, rows), and the rows unchanged."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction, verify
from seglake.lifecycle.compaction import running
from seglake.storage import layout

from compaction_helpers import Writer, exact, mixed_workload, policy, segments

pytestmark = pytest.mark.etcd


def test_a_straggler_rewriting_a_committed_outputs_files_leaves_them_as_recorded(meta, store, settings,
                                                                                  monkeypatch):
    w = Writer(meta, store, settings)
    w.create("st", ["_default", "p1", "p2"], shards=1)
    for step in range(3):
        mixed_workload(w, "st", step)
    before = exact(meta, store, "st")
    p = compaction.plan(meta, store, "st", policy(target_rows=10_000))
    unit = p.units[0]
    real = running._deletes_of
    fired = []

    def other_run_commits_first(m, s, coll, rec, cache):
        if not fired:
            fired.append(1)
            r = compaction.run_unit(meta, store, unit, sources_revision=p.revision)
            assert r.status == compaction.COMMITTED
            out = next(x for x in segments(meta, "st") if x.segment_id == r.output)
            fired.append({f.key: store.get(f.key) if hasattr(store, "get") else None
                          for f in layout.segment_files(out)})
        return real(m, s, coll, rec, cache)

    monkeypatch.setattr(running, "_deletes_of", other_run_commits_first)
    r = compaction.run_unit(meta, store, unit, sources_revision=p.revision)
    monkeypatch.undo()
    assert r.status == compaction.ALREADY, r
    rep = verify.verify_collection(meta, store, "st")
    assert not rep.get("problems"), rep.get("problems")
    assert exact(meta, store, "st") == before
