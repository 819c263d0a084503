"""Issue 26, reproduction 5: an import checks before it writes.

A bundle whose data files are damaged (a flipped byte, a missing file, one file's bytes
in place of another's) or whose numbers are forged is refused before the first etcd key
or store file exists; a failed import can be retried under any name.

Real etcd, real files on local disk."""

from __future__ import annotations

import time
import uuid

import pytest

from seglake.config import Settings
from seglake.dev import demo
from seglake.errors import Conflict
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.meta import Meta
from seglake.meta.alloc import compose_ts, decode_mark
from seglake.storage import layout, open_store
from seglake.storage.local import LocalStore

quiet = dict(say=lambda line: None)


@pytest.fixture
def exported(meta, store, tmp_path):
    """Bundle s1 of `bk` (two segments) in a local target: (target, its document)."""
    demo.seed(meta, store, demo.SeedParams(name="bk", partitions=2, segments=2, rows=200, dim=4))
    snapshot.create(meta, store, "bk", "s1")
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    return target, bundles.read(target, "default", "bk", "s1")


@pytest.fixture
def other(etcd_server, tmp_path):
    """Another seglake (its own etcd root, its own empty store): where bundles are imported."""
    s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": f"dr{uuid.uuid4().hex[:8]}",
                            "store_uri": str(tmp_path / f"store_{uuid.uuid4().hex[:6]}"), "etcd_timeout": 5})
    meta2 = Meta.from_settings(s)
    yield meta2, open_store(s)
    meta2.close()


def _untouched(meta2, store2) -> None:
    assert list(meta2.kv.range(meta2.keys.prefix, keys_only=True)) == [], "etcd records written"
    assert list(store2.list("")) == [], "store files written"


def _inserts(doc) -> list[str]:
    """The data files of the bundle's insert logs, biggest first (distinct contents)."""
    shas = {doc["files"][k]["sha256"]: doc["files"][k]["size"] for k in doc["files"] if k.startswith("insert_log/")}
    return sorted(shas, key=lambda s: (-shas[s], s))


@pytest.mark.parametrize("damage", ["flipped_byte", "missing", "swapped", "truncated"])
def test_a_damaged_data_file_is_refused_before_the_import_writes_anything(exported, other, damage):
    target, doc = exported
    meta2, store2 = other
    a, b = _inserts(doc)[:2]
    key_a, key_b = layout.bundle_blob(a), layout.bundle_blob(b)
    good_a, good_b = target.get(key_a), target.get(key_b)
    if damage == "flipped_byte":
        raw = bytearray(good_a)
        raw[len(raw) // 2] ^= 0x01
        target.put(key_a, bytes(raw))
    elif damage == "missing":
        target.delete_many([key_a])
    elif damage == "swapped":
        target.put(key_a, good_b)
        target.put(key_b, good_a)
    else:
        target.put(key_a, good_a[:-1])
    with pytest.raises(bundles.BundleError, match=a[:16]):
        imports.import_bundle(meta2, store2, target, "bk", "s1", **quiet)
    _untouched(meta2, store2)
    # repaired: the import succeeds, under another name as well as its own
    target.put(key_a, good_a)
    target.put(key_b, good_b)
    out = imports.import_bundle(meta2, store2, target, "bk", "s1", as_collection="bk_other", **quiet)
    assert out["collection"] == "bk_other" and out["rows"] == doc["totals"]["rows"]


def test_a_data_file_damaged_during_the_copy_leaves_nothing_behind(exported, other, monkeypatch):
    """The check passed, then a data file changed before the copy read it: the copy's own
    check refuses it, and the import takes back what it wrote (records, files, snapshot),
    so that a retry under any name starts clean."""
    target, doc = exported
    meta2, store2 = other
    victim = layout.bundle_blob(_inserts(doc)[0])
    good = target.get(victim)
    real = imports._check_data_files

    def check_then_damage(*a, **k):
        real(*a, **k)
        target.put(victim, good[:-1] + bytes([good[-1] ^ 1]))
    monkeypatch.setattr(imports, "_check_data_files", check_then_damage)
    with pytest.raises(bundles.BundleError):
        imports.import_bundle(meta2, store2, target, "bk", "s1", threads=1, **quiet)
    monkeypatch.setattr(imports, "_check_data_files", real)
    assert list(meta2.snapshots.list()) == [] and imports.list_imports(meta2) == []
    assert [o.key for o in store2.list("")] == []
    target.put(victim, good)
    assert imports.import_bundle(meta2, store2, target, "bk", "s1", as_collection="again", **quiet)["rows"] > 0


def test_a_killed_import_can_be_retried_under_another_name(exported, other, monkeypatch):
    """An import that failed half way (its process died while copying) resumes under its
    own name; a retry under another name takes the failed one's place (its snapshot and
    files are removed) instead of being refused as 'already imported'."""
    target, doc = exported
    meta2, store2 = other
    real_put, calls = LocalStore.put, []

    def killed_after_5(self, key, data):
        if self is store2 and key.startswith("insert_log/"):
            calls.append(key)
            if len(calls) > 5:
                raise OSError("killed")
        return real_put(self, key, data)
    monkeypatch.setattr(LocalStore, "put", killed_after_5)
    with pytest.raises(OSError):
        imports.import_bundle(meta2, store2, target, "bk", "s1", threads=1, **quiet)
    monkeypatch.setattr(LocalStore, "put", real_put)
    (failed,) = meta2.snapshots.list()
    out = imports.import_bundle(meta2, store2, target, "bk", "s1", as_collection="bk_retry", **quiet)
    assert out["collection"] == "bk_retry" and out["rows"] == doc["totals"]["rows"]
    assert [(r.collection_name, r.state) for r in meta2.snapshots.list()] == [("bk_retry", "COMMITTED")]
    left = {o.key for o in store2.list("")}
    assert left and not [k for k in left if k.startswith(f"insert_log/{failed.collection_id}/")], \
        "the failed import's files stay"
    (rec,) = imports.list_imports(meta2)
    assert (rec["collection"], rec["state"]) == ("bk_retry", "imported")
    # an import that completed is not taken over: a third name is refused, naming the first
    with pytest.raises(Conflict, match="already imported"):
        imports.import_bundle(meta2, store2, target, "bk", "s1", as_collection="bk_third", **quiet)


def test_a_running_import_is_not_taken_over_by_another_name(exported, other, monkeypatch):
    """While an import runs (its heartbeat is fresh), an import of the same bundle under
    another name is refused, naming the running one: nothing of the running one is removed."""
    from seglake import faults

    target, _ = exported
    meta2, store2 = other
    seen = []

    def point(name):
        if name == "import.after_file" and not seen:
            with pytest.raises(Conflict, match="being imported as snapshot 's1' of default.bk") as e:
                imports.import_bundle(meta2, store2, target, "bk", "s1", as_collection="bk_two", **quiet)
            seen.append(str(e.value))
    monkeypatch.setattr(faults, "point", point)
    out = imports.import_bundle(meta2, store2, target, "bk", "s1", threads=1, **quiet)
    assert seen and out["collection"] == "bk"


def _forge(target, doc, edit) -> None:
    edit(doc)
    bundles.write(target, doc)   # a matching marker: only the content can tell


@pytest.mark.parametrize("field", ["max_ts", "consistent_ts"])
def test_a_bundle_from_the_far_future_is_refused_naming_the_value(exported, other, field):
    """A forged max_ts of 2**63-3 used to be imported and move the TSO past it: no
    timestamp could ever be allocated in that etcd root again."""
    target, doc = exported
    meta2, store2 = other
    forged = 2**63 - 3
    _forge(target, doc, lambda d: d["source"].__setitem__(field, forged))
    with pytest.raises(bundles.BundleError, match=f"{field} {forged}"):
        imports.import_bundle(meta2, store2, target, "bk", "s1", **quiet)
    _untouched(meta2, store2)
    assert meta2.tso.now() < compose_ts(2**44)   # the clock still works


def test_a_bundle_ahead_by_more_than_max_clock_skew_is_refused_and_one_within_it_is_imported(exported, other):
    import time

    target, doc = exported
    meta2, store2 = other
    for by in (2 * 86400, 60):     # a day, a minute: both past the default bound of 5 s
        ahead = compose_ts(int((time.time() + by) * 1000))
        _forge(target, doc, lambda d: d["source"].__setitem__("max_ts", ahead))
        with pytest.raises(bundles.BundleError, match=f"max_ts {ahead}.*ahead of this store's clock.*max_clock_skew"):
            imports.import_bundle(meta2, store2, target, "bk", "s1", **quiet)
        _untouched(meta2, store2)
    soon = compose_ts(int((time.time() + 1) * 1000))
    _forge(target, doc, lambda d: d["source"].__setitem__("max_ts", soon))
    imports.import_bundle(meta2, store2, target, "bk", "s1", **quiet)
    assert decode_mark(meta2.kv.get(meta2.tso.key).value) > soon


def _set_first(doc, section: str, field: str, value) -> None:
    e = doc["segments"][0]
    if section == "segment":
        e[field] = value
    elif section == "binlog":
        e["binlogs"][0]["logs"][0][field] = value
    elif section == "deltalog":
        e["deltalogs"][0][field] = value
    else:
        e["index_files"][0][field] = value


@pytest.mark.parametrize("section,field,value", [
    ("segment", "num_rows", -1), ("segment", "num_rows", 2**70), ("segment", "segment_id", -5),
    ("segment", "dml_ts", 2**63 - 3), ("segment", "start_ts", -1), ("segment", "level", 2**40),
    ("binlog", "entries", -3), ("binlog", "ts_to", 2**63 - 3), ("binlog", "log_id", 2**64),
    ("binlog", "log_id", 1.5),
])
def test_every_number_in_a_segment_entry_is_range_checked(exported, other, section, field, value):
    target, doc = exported
    meta2, store2 = other
    _forge(target, doc, lambda d: _set_first(d, section, field, value))
    with pytest.raises(bundles.BundleError, match=field):
        imports.import_bundle(meta2, store2, target, "bk", "s1", **quiet)
    _untouched(meta2, store2)


def test_a_forged_file_size_is_refused_before_any_write(exported, other):
    """A file listed (and referenced) with a size its data file does not have."""
    target, doc = exported
    meta2, store2 = other
    key = sorted(k for k in doc["files"] if k.startswith("insert_log/"))[0]

    def grow(d):
        d["files"][key]["size"] += 1
        for e in d["segments"]:
            for fl in e["binlogs"]:
                for x in fl["logs"]:
                    if x["path"] == key:
                        x["size"] += 1
    _forge(target, doc, grow)
    with pytest.raises(bundles.BundleError, match=key.replace("/", ".")):
        imports.import_bundle(meta2, store2, target, "bk", "s1", **quiet)
    _untouched(meta2, store2)


def test_a_killed_import_silent_for_a_minute_is_taken_over(exported, other, monkeypatch):
    """A SIGKILLed driver marks nothing: its record still says importing and its heartbeat
    stops. Another name is refused while the heartbeat is fresh and takes over once it has
    been silent for MIN_PENDING_TIMEOUT."""
    from seglake import faults

    target, doc = exported
    meta2, store2 = other

    class Killed(BaseException):   # not an Exception: no handler of the import runs, like a SIGKILL
        pass

    def point(name):
        if name == "import.after_file":
            raise Killed()
    monkeypatch.setattr(faults, "point", point)
    with pytest.raises(Killed):
        imports.import_bundle(meta2, store2, target, "bk", "s1", threads=1, **quiet)
    monkeypatch.undo()
    (rec,) = imports.list_imports(meta2)
    assert rec["state"] == "importing"
    with pytest.raises(Conflict, match="being imported"):
        imports.import_bundle(meta2, store2, target, "bk", "s1", as_collection="bk_retry", **quiet)
    later = time.time() + snapshot.MIN_PENDING_TIMEOUT + 1
    monkeypatch.setattr(imports.time, "time", lambda: later)
    out = imports.import_bundle(meta2, store2, target, "bk", "s1", as_collection="bk_retry", **quiet)
    assert out["collection"] == "bk_retry" and out["rows"] == doc["totals"]["rows"]
    assert [r.collection_name for r in meta2.snapshots.list()] == ["bk_retry"]


def test_an_import_that_committed_but_was_not_marked_is_never_taken_over(exported, other):
    """Killed between its snapshot's commit and marking its record imported: the snapshot
    is COMMITTED and must stay; another name is refused as 'already imported'."""
    import json

    target, _ = exported
    meta2, store2 = other
    imports.import_bundle(meta2, store2, target, "bk", "s1", **quiet)
    (kv,) = list(meta2.kv.range(meta2.keys.backup_imports_prefix()))
    meta2.kv.put(kv.key, json.dumps({**json.loads(kv.value), "state": "importing"}))
    with pytest.raises(Conflict, match="already imported"):
        imports.import_bundle(meta2, store2, target, "bk", "s1", as_collection="bk_other", **quiet)
    assert [(r.collection_name, r.state) for r in meta2.snapshots.list()] == [("bk", "COMMITTED")]


@pytest.mark.parametrize("forge", ["partition_name", "duplicate_partition_name", "schema_dim", "schema_missing"])
def test_a_forged_collection_description_is_refused_before_any_write(exported, other, forge):
    target, doc = exported
    meta2, store2 = other

    def edit(d):
        c = d["snapshot"]["collection"]
        if forge == "partition_name":
            c["partitions"][0]["name"] = "../x"
        elif forge == "duplicate_partition_name":
            c["partitions"][1]["name"] = c["partitions"][0]["name"]
        elif forge == "schema_dim":
            next(f for f in c["schema"] if f.get("dim"))["dim"] = -1
        else:
            del c["schema"]
    _forge(target, doc, edit)
    with pytest.raises(bundles.BundleError, match="partitions or schema are invalid"):
        imports.import_bundle(meta2, store2, target, "bk", "s1", **quiet)
    _untouched(meta2, store2)


def test_another_document_under_an_imported_uid_is_refused(exported, other, monkeypatch):
    """A failed import's ids were allocated for its document; a bundle with the same uid
    but other content (more segments, other ids) must not resume or take over that import
    (its ids would overflow the block allocated for the first document)."""
    target, doc = exported
    meta2, store2 = other
    real_put, calls = LocalStore.put, []

    def killed(self, key, data):
        if self is store2 and key.startswith("insert_log/"):
            calls.append(key)
            if len(calls) > 2:
                raise OSError("killed")
        return real_put(self, key, data)
    monkeypatch.setattr(LocalStore, "put", killed)
    with pytest.raises(OSError):
        imports.import_bundle(meta2, store2, target, "bk", "s1", threads=1, **quiet)
    monkeypatch.setattr(LocalStore, "put", real_put)
    _forge(target, doc, lambda d: d["source"].__setitem__("description", "edited"))
    for as_collection in (None, "bk_other"):
        with pytest.raises(Conflict, match="ANOTHER bundle document with this uid"):
            imports.import_bundle(meta2, store2, target, "bk", "s1", as_collection=as_collection, **quiet)
