"""Issue 26 item 4 / the safety rule "unknown keys refused naming the closest valid one,
before any side effect", adversary rows4: a bundle.json with a key this seglake does not
know (a misspelt "delta_partition" beside or instead of "delta_partitions", "max_tss",
"sha265", ...) was imported with the key silently ignored: an entry whose
delta_partitions was misspelt was read as a segment without the map (a legacy one), its
delete scopes then read through the bundle's own partition ids. Every section of a
seglake bundle (the document, source, its positions, snapshot, its collection, file
entries, segment entries and their logs) refuses an unknown key naming the closest valid one, before the import writes; the
bundle put right is then imported (a refusal blocks no retry). Real etcd, local files."""

from __future__ import annotations

import copy

import pytest

from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import imports

from test_import_checks import _forge, _untouched, exported, other, quiet  # noqa: F401 (fixtures)


def _add(path: tuple, key: str):
    def edit(doc):
        at = doc
        for p in path:
            at = at[p] if not callable(p) else p(at)
        at[key] = 1
    return edit


def _first_file(d):
    return d[sorted(d)[0]]


@pytest.mark.parametrize("path,key,valid", [
    ((), "totalz", "totals"),
    (("source",), "max_tss", "max_ts"),
    (("snapshot",), "partition_idz", "partition_ids"),
    (("files", _first_file), "sha265", "sha256"),
    (("segments", 0), "delta_partition", "delta_partitions"),
    (("segments", 0, "binlogs", 0, "logs", 0), "entriez", "entries"),
    (("segments", 0, "binlogs", 0), "field", "field_id"),
    (("snapshot", "collection"), "shard", "shards"),
    (("source", "positions", lambda d: d[sorted(d)[0]]), "del_hws", "del_hw"),
], ids=["document", "source", "snapshot", "file", "segment", "log", "field_logs", "collection", "position"])
def test_an_unknown_key_is_refused_naming_the_closest_valid_one_before_any_write(exported, other, path, key, valid):
    target, doc = exported
    meta2, store2 = other
    good = copy.deepcopy(doc)
    _forge(target, doc, _add(path, key))
    with pytest.raises(bundles.BundleError, match=f"unknown key '{key}'.*did you mean '{valid}'"):
        imports.import_bundle(meta2, store2, target, "bk", "s1", threads=1, **quiet)
    _untouched(meta2, store2)
    bundles.write(target, good)
    assert imports.import_bundle(meta2, store2, target, "bk", "s1", threads=1, **quiet)["rows"] == doc["totals"]["rows"]


def test_a_misspelt_delta_partitions_instead_of_the_map_is_refused(exported, other):
    target, doc = exported
    meta2, store2 = other

    def rename(d):
        e = d["segments"][0]
        e["delta_partitons"] = e.pop("delta_partitions", None)
    _forge(target, doc, rename)
    with pytest.raises(bundles.BundleError, match="unknown key 'delta_partitons'.*did you mean 'delta_partitions'"):
        imports.import_bundle(meta2, store2, target, "bk", "s1", threads=1, **quiet)
    _untouched(meta2, store2)
