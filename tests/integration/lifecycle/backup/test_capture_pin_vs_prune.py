"""A pin of a capture bundle (seglake.milvus.sources.pin, kept in etcd) racing the retention
prune of the backup target loses one way or the other, never both: a pin answered is a
bundle kept. The prune asks for pins again once its intent is written (holds.drop_unless_held);
a pin waits for a running prune and then looks for its bundle.

Real etcd, real files on local disk (the bundles are seglake exports: the protocol does not
depend on the bundle's kind)."""

from __future__ import annotations

import threading
import time

import pytest

from seglake.errors import NotFound
from seglake.lifecycle import retention
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import holds
from seglake.lifecycle.backup.prune import prune
from seglake.milvus import sources
from seglake.storage import layout
from seglake.storage.local import LocalStore

from bundle_restore_helpers import two_pp_bundles

quiet = dict(say=lambda line: None)


@pytest.fixture
def two_bundles(meta, store, tmp_path):
    """Bundles s1 (older) and s2 of `pp` in a local target."""
    return two_pp_bundles(meta, store, LocalStore(tmp_path / "backup"))


def _pin_key(meta, bundle):
    return meta.keys.milvus_pin("default", "pp", bundle)


def test_a_pin_written_after_the_prune_judged_the_bundle_is_still_seen(meta, two_bundles):
    target = two_bundles
    asked = []

    def pinned(name):   # the prune's first look finds no pin; the pin lands right after it
        asked.append(name)
        if len(asked) == 1:
            sources.pin(meta, target, "default", "pp", name, 3600, by="late")
            return []
        return sources.pinned_by(meta, "default", "pp", name)

    report = prune(target, "pp", retention.parse_policy({"keep_last": 1}), pinned=pinned, sweep=False, **quiet)
    assert report["pruned"] == [] and list(report["held"]) == ["s1"], report
    assert asked == ["s1", "s1"]
    assert bundles.read(target, "default", "pp", "s1")["bundle"] == "s1"      # kept, as the pin said


def test_a_pin_racing_a_prune_that_drops_the_bundle_is_refused_and_removed(meta, two_bundles):
    target = two_bundles
    intent = layout.bundle_pruning("default", "pp", "s1")
    target.put(intent, b'{"at": %f}' % time.time())        # a prune is running on s1
    out = {}

    def pin():
        try:
            out["doc"] = sources.pin(meta, target, "default", "pp", "s1", 3600, by="racer")
        except NotFound as e:
            out["error"] = str(e)

    t = threading.Thread(target=pin)
    t.start()
    time.sleep(1.0)
    assert t.is_alive(), out   # it waits for the prune
    assert meta.kv.get(_pin_key(meta, "s1")) is not None   # written first
    # the prune (which asked for pins before this pin existed) drops the bundle, then ends
    target.delete_many([layout.bundle_commit("default", "pp", "s1")])
    target.delete_many([layout.bundle_doc("default", "pp", "s1")])
    target.delete_many([intent])
    t.join(30)
    assert not t.is_alive()
    assert "was pruned while it was being pinned" in out.get("error", ""), out
    assert meta.kv.get(_pin_key(meta, "s1")) is None       # no pin left that holds nothing


def test_a_pin_waits_out_a_prune_that_keeps_the_bundle(meta, two_bundles):
    target = two_bundles
    intent = layout.bundle_pruning("default", "pp", "s1")
    target.put(intent, b'{"at": %f}' % time.time())
    timer = threading.Timer(1.0, lambda: target.delete_many([intent]))   # a prune that kept it (held)
    timer.start()
    doc = sources.pin(meta, target, "default", "pp", "s1", 3600, by="patient")
    timer.join()
    assert doc["bundle"] == "s1" and sources.pinned_by(meta, "default", "pp", "s1")


def test_a_pin_of_a_bundle_that_is_not_there_writes_nothing(meta, two_bundles):
    with pytest.raises(NotFound, match="nothing to pin"):
        sources.pin(meta, two_bundles, "default", "pp", "nope", 3600)
    assert meta.kv.get(_pin_key(meta, "nope")) is None


def test_the_prune_keeps_a_bundle_pinned_before_it_and_drops_it_once_unpinned(meta, two_bundles):
    target = two_bundles
    sources.pin(meta, target, "default", "pp", "s1", 3600, by="ops")
    policy = retention.parse_policy({"keep_last": 1})
    look = lambda n: sources.pinned_by(meta, "default", "pp", n)   # noqa: E731
    assert prune(target, "pp", policy, pinned=look, sweep=False, **quiet)["held"] == {"s1": look("s1")}
    assert sources.unpin(meta, "default", "pp", "s1")
    assert prune(target, "pp", policy, pinned=look, sweep=False, **quiet)["pruned"] == ["s1"]
    assert not holds.holders(target, "default", "pp", "s1")


@pytest.mark.parametrize("body", [b"{not json", b'{"by": "no time"}', b'{"at": NaN}', b'[1]', b'{"at": "soon"}'])
def test_a_damaged_hold_record_holds_its_bundle_until_it_is_old_by_the_target_s_clock(two_bundles, body):
    """A hold file that cannot be read (damaged, or hand-written) was treated as no hold at
    all: a prune could drop the bundle a reader was in. Now its age on the target judges it,
    as a live record whose writer's clock disagrees with ours is judged."""
    target = two_bundles
    key = layout.bundle_hold("default", "pp", "s1", "damaged0")
    target.put(key, body)
    held_by = holds.holders(target, "default", "pp", "s1")
    assert len(held_by) == 1 and "unreadable record" in held_by[0] and "damaged0" in held_by[0]
    policy = retention.parse_policy({"keep_last": 1})
    assert prune(target, "pp", policy, pinned=lambda n: [], sweep=False, **quiet)["pruned"] == []
    assert holds.live_record(target, key, ttl=0.0) is None     # past its TTL by the target's clock: dead
    target.delete_many([key])
    assert prune(target, "pp", policy, pinned=lambda n: [], sweep=False, **quiet)["pruned"] == ["s1"]
