"""The etcd layer against a real etcd server."""

import threading
import time

import pytest

from seglake.errors import Conflict, Unavailable
from seglake.meta import Meta
from seglake.meta.alloc import TSO, IdAllocator, physical_ms
from seglake.meta.kv import KV, Delete, Put, absent, exists, unchanged

pytestmark = pytest.mark.etcd


def test_a_1000_op_write_is_chunked_and_lands_completely(meta, root_prefix):
    kv = meta.kv
    ops = [Put(f"{root_prefix}/bulk/{i:05d}", f"v{i}") for i in range(1000)]
    kv.write(ops, guard=[absent(f"{root_prefix}/bulk-done")])
    got = {x.key: x.value for x in kv.range(f"{root_prefix}/bulk/")}
    assert len(got) == 1000 and got[f"{root_prefix}/bulk/00999"] == b"v999"
    assert kv.count(f"{root_prefix}/bulk/") == 1000


def test_large_values_are_chunked_under_the_request_limit(meta, root_prefix):
    big = b"x" * 200_000
    meta.kv.write([Put(f"{root_prefix}/big/{i}", big) for i in range(20)])  # 4 MB in total
    assert sum(len(x.value) for x in meta.kv.range(f"{root_prefix}/big/")) == 20 * 200_000


def test_cas_conflict_raises_conflict(meta, root_prefix):
    key = f"{root_prefix}/cas"
    meta.kv.txn([absent(key)], [Put(key, "a")])
    with pytest.raises(Conflict):
        meta.kv.txn([absent(key)], [Put(key, "b")], reason="taken")
    first = meta.kv.get(key)
    meta.kv.put(key, "c")  # someone else writes in between
    with pytest.raises(Conflict, match="concurrent change"):
        meta.kv.txn([unchanged(first)], [Put(key, "d")])
    assert meta.kv.get(key).value == b"c"
    meta.kv.txn([exists(key)], [Delete(key)])
    assert meta.kv.get(key) is None


def test_a_failed_guard_stops_a_chunked_write_at_the_first_chunk(meta, root_prefix):
    guard_key = f"{root_prefix}/parent"
    meta.kv.put(guard_key, "x")
    with pytest.raises(Conflict):
        meta.kv.write([Put(f"{root_prefix}/child/{i}", "v") for i in range(300)], guard=[absent(guard_key)])
    assert meta.kv.count(f"{root_prefix}/child/") == 0


def test_paging_over_20000_keys_returns_all_in_order(meta, root_prefix):
    prefix = f"{root_prefix}/page/"
    meta.kv.write([Put(f"{prefix}{i:06d}", "v") for i in range(20_000)])
    meta.kv.put(f"{root_prefix}/page0", "outside")  # shares the string prefix, not the directory
    keys = [x.key for x in meta.kv.range(prefix, page_size=700, keys_only=True)]
    assert len(keys) == 20_000 and keys == sorted(keys) and len(set(keys)) == 20_000
    assert meta.kv.delete_prefix(prefix, page_size=5000) == 20_000
    assert meta.kv.count(prefix) == 0


def test_range_is_one_consistent_revision(meta, root_prefix):
    prefix = f"{root_prefix}/snap/"
    meta.kv.write([Put(f"{prefix}{i:03d}", "v") for i in range(50)])
    it = meta.kv.range(prefix, page_size=10)
    first = [next(it) for _ in range(10)]
    meta.kv.put(f"{prefix}999", "late")  # written after the first page
    rest = list(it)
    assert len(first) + len(rest) == 50


def test_id_allocator_is_monotonic_across_client_restarts(settings, root_prefix):
    seen = []
    for _ in range(3):
        with KV.from_settings(settings) as kv:
            ids = IdAllocator(kv, f"{root_prefix}/alloc/id", block_size=100)
            seen += [ids.allocate() for _ in range(150)] + [ids.allocate(500)]
    assert seen == sorted(seen) and len(set(seen)) == len(seen)


def test_id_allocator_concurrent_blocks_never_overlap(settings, root_prefix):
    out, errors = [], []

    def worker():
        try:
            with KV.from_settings(settings) as kv:
                a = IdAllocator(kv, f"{root_prefix}/alloc/id", block_size=10)
                out.extend(a.allocate() for _ in range(100))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and len(out) == 400 and len(set(out)) == 400


def test_tso_is_monotonic_across_restarts_even_if_the_clock_goes_back(settings, root_prefix):
    key = f"{root_prefix}/alloc/tso"
    with KV.from_settings(settings) as kv:
        t1 = TSO(kv, key)
        a = [t1.now() for _ in range(1000)]
    with KV.from_settings(settings) as kv:
        t2 = TSO(kv, key, clock=lambda: time.time() - 20 * 3600,  # a wall clock far back,
                 max_clock_skew=86400)                           # within the widest bound
        b = [t2.now() for _ in range(10)]
    assert a == sorted(a) and len(set(a)) == 1000
    assert b[0] > a[-1] and b == sorted(b)
    # the clock far back stalls the physical part; the logical part counts on (the mark
    # moves by the timestamps reserved, not by a window of milliseconds)
    assert physical_ms(a[-1]) <= physical_ms(b[0]) <= physical_ms(a[-1]) + 1


def test_unreachable_etcd_raises_unavailable_after_bounded_retries():
    from seglake.dev.devstack import free_port

    kv = KV(f"127.0.0.1:{free_port()}", timeout=0.5, retries=2)
    with pytest.raises(Unavailable, match="etcd get"):
        kv.get("x")
    with pytest.raises(Unavailable):
        kv.put("x", "y")


def test_leases_expire_keys(meta, root_prefix):
    lease = meta.kv.grant_lease(5)
    meta.kv.put(f"{root_prefix}/leased", "v", lease=lease)
    assert meta.kv.lease_ttl(lease) > 0
    meta.kv.refresh_lease(lease)
    meta.kv.revoke_lease(lease)
    assert meta.kv.get(f"{root_prefix}/leased") is None


def test_meta_from_settings_uses_the_root(settings):
    with Meta.from_settings(settings) as m:
        assert m.keys.root == settings.etcd_root


def test_get_many_reads_hundreds_of_keys_in_few_round_trips(meta, root_prefix):
    keys = [f"{root_prefix}/gm/{i:04d}" for i in range(300)]
    meta.kv.write([Put(k, k[-4:]) for k in keys[::2]])
    calls = []
    real = meta.kv._call

    def counting(fn, **kw):
        calls.append(kw["what"])
        return real(fn, **kw)

    meta.kv._call = counting
    got = meta.kv.get_many(keys + [keys[0]])
    meta.kv._call = real
    assert len(calls) == 3 and len(got) == 300
    assert all(got[k].value == k[-4:].encode() for k in keys[::2])
    assert all(got[k] is None for k in keys[1::2])
