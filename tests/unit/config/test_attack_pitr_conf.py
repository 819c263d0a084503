"""Attack on the restore_database / collection_undrop forms (issue 30): what check_conf
lets through must be what the run can do; everything else refused before the run, in
one sentence naming the key."""

from __future__ import annotations

import pytest

from seglake import contract
from seglake.errors import ValidationError

AT = "2026-11-27T12:00:00Z"


@pytest.mark.parametrize("collections, why", [
    (" , ", "names no collection"),
    (",", "names no collection"),
    ("a,,b", "empty name between commas"),
    ("a, ,b", "empty name between commas"),
    ("a" * 252, "longer than 255"),          # the target a...a_noon is no name
])
def test_restore_database_refuses_a_collections_list_the_run_cannot_do(collections, why):
    with pytest.raises(ValidationError, match=why) as e:
        contract.check_conf("restore_database", {"as_of": AT, "suffix": "_noon", "collections": collections})
    assert "'collections'" in str(e.value)


@pytest.mark.parametrize("collections", [None, "", "   ", "a", " a , b ", "a" * 249])
def test_restore_database_takes_a_list_it_can_do(collections):
    suffix = "_x" if collections != "a" * 249 else "_12345"   # a 255-character target
    out = contract.check_conf("restore_database", {"as_of": AT, "suffix": suffix, "collections": collections})
    assert out["collections"] == collections


def test_collection_undrop_refuses_a_bundle_without_from_target():
    with pytest.raises(ValidationError, match="'bundle'.*from_target"):
        contract.check_conf("collection_undrop", {"collection": "a", "target": "b", "bundle": "nightly_1"})
    out = contract.check_conf("collection_undrop", {"collection": "a", "target": "b", "bundle": "nightly_1",
                                                    "from_target": True})
    assert out["bundle"] == "nightly_1"
