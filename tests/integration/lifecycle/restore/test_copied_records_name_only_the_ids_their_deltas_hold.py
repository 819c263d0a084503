"""A collection with many partitions (Milvus allows 1024 by default, 4096 at most;
names up to 255 characters): a copied segment's record names only the partition ids its
delta logs hold (the flusher records them), not the collection's whole {id: name}, so
copied records (and manifest and bundle entries) stay within a small factor of their
source's whatever the partition count, for every hop. Rows checked against the model."""

from __future__ import annotations

from seglake.meta.codec import encode_struct

from copy_model_helpers import Writer, rows, snap_and_restore

PARTS = ["_default"] + [f"partition_with_a_descriptive_name_of_about_sixty_four_chars_{i:04d}" for i in range(1, 1024)]


def test_copied_segment_records_do_not_grow_with_the_partition_count(meta, store, settings):
    w = Writer(meta, store, settings)
    src = w.create("src", PARTS)
    w.insert("src", range(1, 11), PARTS[1], 1.0)
    w.insert("src", range(1, 11), PARTS[2], 2.0)
    w.flush("src")
    w.delete("src", [1, 2], partition=PARTS[1])
    w.insert("src", [3], PARTS[2], 3.0, upsert=True)
    w.flush("src")
    assert rows(meta, store, "src") == w.model.visible()
    snap_and_restore(meta, store, "src", "r1")
    snap_and_restore(meta, store, "r1", "r2")
    assert rows(meta, store, "r2") == w.model.visible()

    def sizes(name):
        c = meta.catalog.get_by_name(name)
        return {s.source["segment_id"] if s.source else s.segment_id: len(encode_struct(s))
                for s in meta.segments.list(c.collection_id) if s.deltalogs}

    before = {s.segment_id: len(encode_struct(s)) for s in meta.segments.list(src.collection_id) if s.deltalogs}
    after = sizes("r1")
    print("segment records with delta logs, bytes: src", sorted(before.values()), "restored", sorted(after.values()))
    worst = max(after[k] / before[k] for k in before)
    assert worst < 4, (f"a copied segment record is {worst:.0f}x its source's "
                       f"({max(after.values())} bytes): the whole partition list rides in every copy")
