"""A restore into Milvus imports segment by segment (a record per segment in etcd: staged,
importing, imported, failed), but the page and the API showed only the restore's state:
"importing" for an hour said nothing of how far it was. They now say how many segments are
imported of how many (and how many failed)."""

import json
import time

from seglake import console


def test_a_restore_into_milvus_shows_its_segments_imported_of_total(meta, store):
    rid = "r1"
    meta.kv.put(meta.keys.milvus_restore(rid), json.dumps({
        "v": 1, "state": "importing", "bundle": "default.demo/b1", "name": "back", "created_at": time.time(),
        "target": {"address": "127.0.0.1:19530"}}))
    for sid, state in [(1, "imported"), (2, "imported"), (3, "importing"), (4, "staged"), (5, "failed")]:
        meta.kv.put(meta.keys.milvus_restore_segment(rid, sid), json.dumps({"v": 1, "state": state, "attempts": 1}))
    r = console.milvus(meta, time.time())["restores"][0]
    assert (r["segments_imported"], r["segments_total"], r["segments_failed"]) == (2, 5, 1), r
    from seglake_airflow.ui.render import render_page

    page = render_page(console.overview(meta, store))
    assert "2 of 5 imported, 1 failed" in page


def test_a_unit_record_counts_the_segments_it_imports(meta, store):
    """A restore imports a partition's segments in one task (restore.units): its record says
    how many segments it holds, and the progress counts segments, not tasks; a record with a
    bad count counts one."""
    rid = "r2"
    meta.kv.put(meta.keys.milvus_restore(rid), json.dumps({
        "v": 2, "state": "created", "bundle": "default.demo/b1", "name": "back2", "created_at": time.time(),
        "target": {"address": "127.0.0.1:19530"}}))
    for uid, state, n in [(10, "imported", 3), (20, "importing", 4), (30, "failed", 2), (40, "staged", -5),
                          (50, "staged", True)]:
        meta.kv.put(meta.keys.milvus_restore_segment(rid, uid), json.dumps({"v": 1, "state": state, "segments": n}))
    r = console.milvus(meta, time.time())["restores"][0]
    assert (r["segments_imported"], r["segments_total"], r["segments_failed"]) == (3, 11, 2), r
