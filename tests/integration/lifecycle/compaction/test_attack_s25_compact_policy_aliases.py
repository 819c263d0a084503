"""Attack s25: a policy key given twice, as `x` and as `compaction_x` (both spellings are
accepted), with different values. Which one was meant cannot be told; the later one
silently won -- in the engine API (parse_overrides, Policy.from_settings, Policy.from_json),
in a set policy (recorded), in a hand-edited stored record (used by every run) and in a
Spark job's --targets. Now refused, naming the key, before anything is written; and an
unknown key written in capitals names its closest valid key."""

from __future__ import annotations

import json

import pytest

from seglake.errors import SeglakeError, ValidationError
from seglake.lifecycle import compaction
from seglake.meta.codec import encode

from compaction_helpers import Writer

pytestmark = pytest.mark.etcd

DUPS = [{"min_segment_rows": 5, "compaction_min_segment_rows": 50_000},
        {"compaction_delete_ratio": 0.9, "delete_ratio": 0.1},
        {"l0_age": 0.0, "compaction_l0_age": 86400.0, "target_rows": 7}]


@pytest.mark.parametrize("values", DUPS)
def test_a_key_given_twice_is_refused_by_every_engine_entry(settings, values):
    for fn in (compaction.parse_overrides, lambda v: compaction.Policy.from_settings(settings, v),
               compaction.Policy.from_json, lambda v: compaction.effective(settings, v),
               lambda v: compaction.effective(settings, None, v)):
        with pytest.raises(ValidationError, match="both set"):
            fn(values)
    good = {"collection": "c", "db": "default", "collection_id": 7, "policy": values}
    with pytest.raises(ValidationError, match="both set"):
        compaction.parse_targets(json.dumps([good]))


@pytest.mark.parametrize("values", DUPS)
def test_set_policy_with_a_key_given_twice_writes_nothing(meta, store, settings, values):
    Writer(meta, store, settings).create("c", ["_default"], shards=1)
    rev = meta.kv.revision()
    with pytest.raises(ValidationError, match="both set"):
        compaction.set_policy(meta, settings, "c", values, scheduled=True)
    assert meta.kv.revision() == rev and compaction.get_policy(meta, "c") is None


def test_a_stored_record_with_a_key_given_twice_is_refused_when_read(meta, store, settings):
    coll = Writer(meta, store, settings).create("c", ["_default"], shards=1)
    cid = coll.collection_id if hasattr(coll, "collection_id") else meta.catalog.get_by_name("c").collection_id
    doc = {"collection_id": cid, "collection": "c", "db": "default", "scheduled": True,
           "policy": DUPS[0], "updated_at": 1.0, "by": "hand"}
    meta.kv.put(meta.keys.compaction_policy(cid), encode(doc))
    with pytest.raises(SeglakeError, match="both set"):
        compaction.policy_for(meta, settings, "c")
    [t] = compaction.scheduled_targets(meta, settings)
    assert "both set" in t["error"]


@pytest.mark.parametrize("key,near", [("MIN_SEGMENT_ROWS", "min_segment_rows"), ("Delete_Ratio", "delete_ratio"),
                                      ("COMPACTION_L0_AGE", "l0_age"), ("l0_age_seconds", "l0_age"),
                                      ("protection_seconds", "protection")])
def test_an_unknown_key_names_its_closest_whatever_its_case(settings, key, near):
    for fn in (compaction.parse_overrides, lambda v: compaction.Policy.from_settings(settings, v),
               compaction.Policy.from_json):
        with pytest.raises(ValidationError, match=f"did you mean '{near}'"):
            fn({key: 1})
