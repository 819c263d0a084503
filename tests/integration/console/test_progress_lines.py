"""The copy's progress lines from etcd while a real copy job runs (real etcd, real
files): intermediate lines while the copy is slowed, then a final line with the totals."""

import re

from seglake import faults
from seglake.dev import demo
from seglake.lifecycle import copyjob, restore, snapshot
from seglake.progress import watch_copy_job


def test_watch_copy_job_logs_progress_while_copying_and_a_final_line(meta, store, settings):
    from seglake.meta import Meta

    demo.seed(meta, store, demo.SeedParams(partitions=1, segments=4, rows=50, dim=4))
    snapshot.create(meta, store, "demo", "s1")
    job_id = restore.restore(meta, store, "demo", "s1", "copy1")
    copyjob.plan(meta, job_id, 1)
    job, _ = meta.copyjobs.get(job_id)
    lines = []
    with Meta.from_settings(settings) as watcher:
        with faults.inject("copy.after_file", "sleep=0.05"), \
                watch_copy_job(watcher, job_id, interval=0.2, emit=lines.append):
            copyjob.run_inline(meta, store, job_id)
    assert len(lines) >= 3, lines
    pat = re.compile(rf"copy job {job_id}: (\d+)/4 segments, (\d+)/{job.total_files} files, .+")
    counts = [tuple(map(int, pat.fullmatch(line.removesuffix(" (done)")).groups())) for line in lines]
    assert counts == sorted(counts) and counts[-1] == (4, job.total_files)
    assert any(0 < c[1] < job.total_files for c in counts[:-1]), lines   # seen mid-way
    assert any("/s, ETA " in line for line in lines[:-1]), lines
    assert lines[-1].endswith("(100.0%), " + lines[-1].split(", ")[-1]) and lines[-1].endswith(" (done)")
