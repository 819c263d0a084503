"""attack s22: one flipped byte (same size) in a data file of the store.

The guide: "a file is visible only when complete and checked by content (not size)".
A segment record keeps each binlog's size and row count but no content checksum, so a
bit flipped in place (bit rot, a bad disk, a stray writer) in an insert log is served as
rows with changed values, and `verify` (the operator's check of a collection) says ok:
it checks size and the Parquet row count only. The damage then travels into every
snapshot export and restore (each copies the bytes faithfully and hashes what it read).
Expected: verify names the file (or a read refuses it); actual: ok, different rows."""

import os

from fault_harness import price_rows as _rows
from fault_harness import seed_and_snapshot

from seglake.lifecycle import verify
from seglake.storage import layout




def _flip_until_rows_change(meta, store, path, want):
    """Flip one bit at a time (restoring the file between tries) until a read succeeds
    with rows different from `want`; returns its position, the damaged bytes left in
    place -- or None (the file restored) when every flip is refused or changes nothing:
    what the page CRCs and the row counts checked on every read give (session 22)."""
    orig = open(path, "rb").read()
    start = len(orig) // 8
    step = max(1, (len(orig) - start) // 150)        # ~150 flips spread over the pages, the footer's end
    for pos in sorted({*range(start, len(orig), step), *range(max(start, len(orig) - 32), len(orig))}):
        b = bytearray(orig)
        b[pos] ^= 0x01
        open(path, "wb").write(bytes(b))
        try:
            if _rows(meta, store, "demo") != want:
                return pos
        except Exception:  # noqa: BLE001 - this flip is caught by the decoder: try the next
            pass
        open(path, "wb").write(orig)
    return None


def test_a_bit_flipped_in_a_store_data_file_is_found_by_verify_and_never_served(meta, store, settings):
    coll, _ = seed_and_snapshot(meta, store, snap=None)
    want = _rows(meta, store, "demo")
    assert verify.verify_collection(meta, store, "demo")["ok"]
    seg = next(iter(meta.segments.list(coll.collection_id)))
    price = next(f for f in layout.segment_files(seg) if f.kind == "insert" and f.key.split("/")[-2] == "102")
    path = os.path.join(store.uri, price.key)
    size = os.path.getsize(path)
    if _flip_until_rows_change(meta, store, path, want) is None:
        return                                                 # no flip is served as other rows
    assert os.path.getsize(path) == size                     # same size: damaged in place
    report = verify.verify_collection(meta, store, "demo")
    assert not report["ok"], (
        "verify says the collection is ok while one of its data files is damaged and its rows "
        f"differ from what was written: {price.key}")


def test_a_bit_flipped_in_a_store_data_file_is_not_laundered_into_a_verified_bundle(meta, store, tmp_path):
    """The same damage, then a snapshot and an export: the export hashes what it read and
    the bundle verifies -- the backup now holds the damaged rows under a valid SHA-256."""
    from seglake.lifecycle import snapshot
    from seglake.lifecycle.backup import export
    from seglake.lifecycle.backup import verify as bverify
    from seglake.storage.local import LocalStore

    coll, _ = seed_and_snapshot(meta, store, snap=None)
    want = _rows(meta, store, "demo")
    seg = next(iter(meta.segments.list(coll.collection_id)))
    price = next(f for f in layout.segment_files(seg) if f.kind == "insert" and f.key.split("/")[-2] == "102")
    if _flip_until_rows_change(meta, store, os.path.join(store.uri, price.key), want) is None:
        return
    snapshot.create(meta, store, "demo", "s1")
    target = LocalStore(tmp_path / "backup")
    try:
        rep = export.export(meta, store, target, "demo", "s1", say=lambda line: None)
    except Exception as e:  # noqa: BLE001 - refusing is the expected outcome
        rep = {"state": f"refused: {e}"}
    if rep["state"] == "committed":
        assert not bverify.verify(target, "demo", "s1", say=lambda line: None)["ok"], (
            "a bundle of a damaged data file was exported and verifies: the backup holds rows that differ "
            "from what was written")


def test_a_bit_flipped_in_a_store_delta_log_never_brings_back_a_deleted_row(meta, store):
    """The same damage in a delete log: an acknowledged delete is undone (a deleted row
    visible again, another row hidden) while verify says ok."""
    coll, _ = seed_and_snapshot(meta, store, snap=None)
    want = _rows(meta, store, "demo")
    seg = next(s for s in meta.segments.list(coll.collection_id) if s.deltalogs)
    delta = next(f for f in layout.segment_files(seg) if f.kind == "delta")
    if _flip_until_rows_change(meta, store, os.path.join(store.uri, delta.key), want) is None:
        return
    got = _rows(meta, store, "demo")
    back = sorted({r[0] for r in got} - {r[0] for r in want})
    report = verify.verify_collection(meta, store, "demo")
    assert not report["ok"], (f"verify says ok while a damaged delete log changed the visible rows "
                              f"(deleted pks visible again: {back[:5]}; {len(want)} rows before, {len(got)} now)")
