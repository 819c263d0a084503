"""Engine entry points refuse NaN / Infinity / out-of-range numbers before any write
(issue 8, item 3): a NaN restore timeout made the job record undecodable (jobs list,
plan and GC's record cleanup failed, the snapshot stayed pinned), a NaN TTL meant
"never expires", `gc pause` with an infinite TTL crashed."""

import math

import pytest

from seglake.dev import demo
from seglake.errors import ValidationError
from seglake.lifecycle import gc, restore, snapshot

SMALL = demo.SeedParams(partitions=1, segments=1, rows=10, dim=4)


def _etcd(meta):
    return {kv.key: kv.value for kv in meta.kv.range(meta.keys.prefix)}


@pytest.fixture
def snap(meta, store):
    demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "s")
    return _etcd(meta)


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf, 0, 8 * 86400, True, "60"])
def test_restore_timeout(meta, store, snap, timeout):
    with pytest.raises(ValidationError, match="restore timeout"):
        restore.restore(meta, store, "demo", "s", "t", timeout=timeout)
    assert _etcd(meta) == snap


@pytest.mark.parametrize("ttl", [math.nan, math.inf, -1, 11 * 365 * 86400])
def test_snapshot_ttl(meta, store, snap, ttl):
    with pytest.raises(ValidationError, match="snapshot ttl"):
        snapshot.begin(meta, "demo", "s2", ttl=ttl)
    assert _etcd(meta) == snap


@pytest.mark.parametrize("ttl", [math.nan, math.inf, 0, -5, 2 * 365 * 86400])
def test_gc_pause_ttl(meta, store, snap, ttl):
    with pytest.raises(ValidationError, match="gc pause ttl"):
        gc.pause(meta, None, ttl=ttl)
    assert _etcd(meta) == snap


def test_gc_options_refuse_a_nan_tolerance_even_with_force(meta):
    for name in ("missing_tolerance", "drop_tolerance"):
        with pytest.raises(ValidationError, match=name):
            gc.GCOptions(**{name: math.nan}, force=True).check()
