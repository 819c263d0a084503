"""Found by the adversarial review: odd names under wal/ crashed GC (real etcd, real files).

`str.isdigit()` is true for superscript digits ('\u00b2') but `int()` refuses them:
layout.parse_wal_fragment and wal.log.validate_pchannel raise ValueError instead of
answering "not ours", so one stray file makes every whole-store GC fail (mark crashes)
or disables WAL truncation for every pchannel."""

import os
import time

import pytest

from seglake.dev import demo
from seglake.lifecycle import gc
from seglake.lifecycle.gc import walview as gcwalview
from seglake.storage import layout
from seglake.wal.log import PCHANNEL_PREFIX

SMALL = demo.SeedParams(partitions=1, segments=1, rows=10, dim=4)
DAY = 86400


def _write(store, rel, data=b"x", age=2 * DAY):
    path = os.path.join(store.uri, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    t = time.time() - age
    os.utime(path, (t, t))
    return path


@pytest.fixture
def coll(meta, store):
    c, _ = demo.seed(meta, store, SMALL)
    t = time.time() - 2 * DAY
    for o in store.list(""):
        os.utime(os.path.join(store.uri, o.key), (t, t))
    return c


def test_parse_wal_fragment_never_raises_on_superscript_digits():
    key = f"wal/{PCHANNEL_PREFIX}0/{'0' * 19}\u00b2.frag"
    assert layout.parse_wal_fragment(key) is None  # today: ValueError from int()


def test_is_pchannel_never_raises_on_superscript_digits():
    assert gcwalview._is_pchannel(f"{PCHANNEL_PREFIX}\u00b2") is False  # today: ValueError


@pytest.mark.parametrize("odd", [
    f"wal/{PCHANNEL_PREFIX}0/{'0' * 19}\u00b2.frag",          # superscript digit in the number
    f"wal/{PCHANNEL_PREFIX}\u00b2/{1:020d}.frag",               # superscript digit in the pchannel
])
def test_one_odd_wal_name_neither_crashes_gc_nor_is_deleted(meta, store, coll, odd):
    c = coll.collection_id
    odd_path = _write(store, odd)
    orphan = _write(store, f"insert_log/{c}/9/9/100/3")
    res = gc.run(meta, store, gc.GCOptions())            # today: ValueError out of mark
    assert os.path.exists(odd_path)
    assert not os.path.exists(orphan)
    assert res["mark"]["unrecognised"]["files"] >= 1


def test_an_odd_wal_directory_does_not_disable_truncation_of_real_pchannels(meta, store, coll):
    _write(store, f"wal/{PCHANNEL_PREFIX}0/{1:020d}.frag")
    _write(store, f"wal/{PCHANNEL_PREFIX}\u00b2/readme")
    view = gc.load_wal_view(meta, store, None)
    assert view.error is None, view.error                   # today: "ValueError: invalid literal..."
    assert f"{PCHANNEL_PREFIX}0" in view.truncatable
