"""Issue 26, reproduction 6 (rate limits): two exports at 4 MiB/s each ran at 2.6 + 2.7
MiB/s -- each run had its own limit. A store-wide limit is ONE budget shared by all copy
work of the store (copy jobs, exports, imports, every runner of each).

Real etcd; a fake clock where the budget arithmetic is checked (no timed assertion)."""

from __future__ import annotations

import math

import pytest

from seglake import throttle
from seglake.dev import demo
from seglake.errors import ValidationError
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import export as exports
from seglake.storage.local import LocalStore

MiB = 1 << 20
quiet = dict(say=lambda line: None)


def test_two_runs_share_the_stores_limit(meta):
    now, slept = [1000.0], []
    clock, sleep = (lambda: now[0]), slept.append
    throttle.set_store_limit(meta, 4 * MiB)
    a = throttle.for_run(meta, meta.keys.backup_throttle("a"), 0, 0, clock, sleep)
    b = throttle.for_run(meta, meta.keys.backup_throttle("b"), 0, 0, clock, sleep)
    assert a.acquire(4 * MiB, 1) == pytest.approx(1 - throttle.BURST)
    # b has no limit of its own: it waits for a's share of the store's budget too
    assert b.acquire(4 * MiB, 1) == pytest.approx(2 - throttle.BURST)
    assert b.report()["store_limit_bytes_per_second"] == 4 * MiB
    # removed: runs that start afterwards are unlimited
    throttle.set_store_limit(meta, 0)
    assert throttle.for_run(meta, meta.keys.backup_throttle("c"), 0, 0, clock, sleep).acquire(64 * MiB) == 0


def test_a_run_keeps_its_own_lower_limit_under_the_stores(meta):
    now, slept = [1000.0], []
    throttle.set_store_limit(meta, 8 * MiB)
    run = throttle.for_run(meta, meta.keys.backup_throttle("own"), 2 * MiB, 0, lambda: now[0], slept.append)
    waited = run.acquire(4 * MiB, 1)
    assert waited == pytest.approx(2 - throttle.BURST + 0.5 - throttle.BURST)   # its own 2 s, then the store's


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "4"])
def test_a_bad_store_limit_is_refused_before_it_is_written(meta, bad):
    with pytest.raises(ValidationError):
        throttle.set_store_limit(meta, bad)
    assert meta.kv.get(meta.keys.copy_store_limit()) is None


def test_exports_and_copy_jobs_take_their_cost_from_the_stores_limit(meta, store, tmp_path):
    from seglake.lifecycle import restore
    from seglake.lifecycle.copyjob import copying

    demo.seed(meta, store, demo.SeedParams(name="bk", partitions=1, segments=1, rows=100, dim=4))
    snapshot.create(meta, store, "bk", "s1")
    throttle.set_store_limit(meta, 1e12)
    rep = exports.export(meta, store, LocalStore(tmp_path / "backup"), "bk", "s1", **quiet)
    assert rep["throttle"]["store_limit_bytes_per_second"] == 1e12
    job_id = restore.restore(meta, store, "bk", "s1", "bk_copy")
    assert copying.job_throttle(meta, meta.copyjobs.get(job_id)[0]).shared.bps == 1e12


def test_the_cli_shows_sets_and_removes_the_stores_limit(meta, settings, monkeypatch, capsys):
    from seglake import cli

    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    assert cli.main(["jobs", "limit"]) == 0
    assert "unlimited B/s" in capsys.readouterr().out
    assert cli.main(["jobs", "limit", "--max-mib-per-second", "4", "--max-requests-per-second", "50"]) == 0
    assert "4.0 MiB/s, 50 req/s" in capsys.readouterr().out
    assert throttle.store_limit(meta) == (4 * MiB, 50)
    assert cli.main(["jobs", "limit", "--max-requests-per-second", "0"]) == 0   # the other value is kept
    assert throttle.store_limit(meta) == (4 * MiB, 0)
    assert cli.main(["jobs", "limit", "--max-mib-per-second", "0"]) == 0
    assert meta.kv.get(meta.keys.copy_store_limit()) is None
