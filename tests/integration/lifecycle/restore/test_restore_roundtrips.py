"""Issue 8 item 21: the restore's etcd round trips do not grow with its segments (reads
batched with get_many, task writes guarded on the attempt's own last write), and the
guards that replaced the per-file re-reads still stop a superseded attempt."""


from seglake.dev import demo
from seglake.lifecycle import copyjob, restore, snapshot
from seglake.lifecycle.copyjob import copying
from seglake.meta.copyjobs import JOB_COMPLETED, TASK_IN_PROGRESS
from seglake.meta.kv import KV


def _round_trips(meta, store, monkeypatch, name, segments):
    demo.seed(meta, store, demo.SeedParams(name=name, partitions=2, segments=segments, rows=50, dim=4))
    snapshot.create(meta, store, name, "s")
    job_id = restore.restore(meta, store, name, "s", f"{name}_copy")
    copyjob.plan(meta, job_id, 1000)  # one task: only per-segment work can differ
    calls = []
    original = KV._call
    monkeypatch.setattr(KV, "_call", lambda self, fn, **k: (calls.append(k["what"]), original(self, fn, **k))[1])
    copyjob.run_inline(meta, store, job_id)
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED
    monkeypatch.setattr(KV, "_call", original)
    return calls


def test_copy_and_finalize_round_trips_do_not_grow_with_segments(meta, store, monkeypatch):
    monkeypatch.setattr(copying, "PROGRESS_EVERY_S", 1e9)  # progress saves are time-based
    few = _round_trips(meta, store, monkeypatch, "few", 2)       # 4 segments
    many = _round_trips(meta, store, monkeypatch, "many", 30)    # 60 segments, one 64-segment batch
    assert len(many) == len(few), (len(few), len(many), sorted(set(many) - set(few)))


def test_a_superseded_attempt_stops_at_its_next_progress_save(meta, store, monkeypatch):
    """A re-drive takes the task over mid-copy: the old attempt's next progress save
    (guarded on its own last write) conflicts, re-reads, and stops without writing."""
    demo.seed(meta, store, demo.SeedParams(name="sup", partitions=1, segments=4, rows=50, dim=4))
    snapshot.create(meta, store, "sup", "s")
    job_id = restore.restore(meta, store, "sup", "s", "sup_copy")
    copyjob.plan(meta, job_id, 1000)
    monkeypatch.setattr(copying, "PROGRESS_EVERY_S", -1.0)  # save after every segment
    original, taken = copying._copy_one, []

    def copy_one(*a, **k):
        if not taken:  # the re-drive bumps the attempt while the first file is copied
            task, kv = meta.copyjobs.get_task(job_id, 0)
            meta.copyjobs.update_task(kv, task.replace(attempt=task.attempt + 1))
            taken.append(task.attempt + 1)
        return original(*a, **k)
    monkeypatch.setattr(copying, "_copy_one", copy_one)
    out = copyjob.copy_task(meta, store, job_id, 0)
    cur = meta.copyjobs.get_task(job_id, 0)[0]
    assert (out.state, out.attempt) == (TASK_IN_PROGRESS, 2) == (cur.state, cur.attempt)
    assert cur.copied_segments == 0  # the zombie wrote no progress after losing the task
