"""restore.units: the import tasks of a restore into Milvus. A partition's segments go in one
task (up to GROUP_BYTES of files), never two partitions in one; the plan is a pure function
of the bundle (a re-run plans the same units, whose staging dirs identify their imports);
a restore recorded per segment (v1) keeps one unit per segment with the segment's dirs."""

from seglake.milvus import restore


def _doc(sizes: dict[int, tuple[int, int]]) -> dict:
    """segments {sid: (partition id, bytes)}: two insert logs (fields 0 and 1) and one delete log each."""
    files, segs = {}, []
    for sid, (pid, size) in sizes.items():
        paths = [f"insert_log/7/{pid}/{sid}/{f}/{sid}{f}" for f in (0, 1)] + [f"delta_log/7/{pid}/{sid}/{sid}9"]
        for k, p in enumerate(paths):
            files[p] = {"sha256": f"{sid:060d}{k:04d}", "size": size // 3 + (size % 3 if k == 0 else 0)}
        segs.append({"segment_id": sid, "partition_id": pid, "num_rows": 10,
                     "binlogs": [{"field_id": f, "logs": [{"path": paths[f], "entries": 10}]} for f in (0, 1)],
                     "deltalogs": [{"logs": [{"path": paths[2]}]}]})
    return {"source": {"collection_id": 7}, "files": files, "segments": segs[::-1],
            "snapshot": {"collection": {"partitions": [{"partition_id": 1, "name": "_default"},
                                                       {"partition_id": 2, "name": "p2"}]}}}


def test_a_partitions_segments_are_one_import_up_to_the_bound(monkeypatch):
    monkeypatch.setattr(restore, "GROUP_BYTES", 1000)
    doc = _doc({11: (1, 400), 12: (2, 300), 13: (1, 500), 14: (1, 200), 15: (2, 2000), 16: (2, 100)})
    got = restore.units(doc, {"rid": "r"})
    assert [(u["unit_id"], u["partition"], [s["segment_id"] for s in u["segments"]]) for u in got] == [
        (11, "_default", [11, 13]), (12, "p2", [12]), (14, "_default", [14]), (15, "p2", [15]), (16, "p2", [16])]
    u = got[0]
    assert u["dirs"] == ["r/11/insert_log/7/1/", "r/11/delta_log/7/1/"] and u["base"] == "r/11"
    assert u["rows"] == 20 and [p for p, _, _ in u["segments"][1]["files"]][0] == "insert_log/7/1/13/0/130"
    assert restore.units(doc, {"rid": "r"}) == got                      # the same plan on a re-run
    doc["segments"].reverse()
    assert restore.units(doc, {"rid": "r"}) == got                      # whatever the bundle's order


def test_by_default_a_partition_is_one_import():
    doc = _doc({sid: (1 + sid % 2, 10_000) for sid in range(20, 40)})
    got = restore.units(doc, {"rid": "x"})
    assert [(u["partition"], len(u["segments"])) for u in got] == [("_default", 10), ("p2", 10)]
    assert len({tuple(u["dirs"]) for u in got}) == 2


def test_a_restore_recorded_per_segment_resumes_per_segment():
    doc = _doc({5: (1, 10), 6: (1, 10)})
    got = restore.units(doc, {"rid": "r"}, group_bytes=0)
    assert [u["dirs"] for u in got] == [["r/5/insert_log/7/1/5/", "r/5/delta_log/7/1/5/"],
                                        ["r/6/insert_log/7/1/6/", "r/6/delta_log/7/1/6/"]]


def test_a_pk_filter_fix_stays_with_its_segment(monkeypatch):
    doc = _doc({5: (1, 10), 6: (1, 10)})
    plan = {"rid": "r", "delete_fixes": {"6": {"drop_deletes": [3], "skip_rows": [1]}}}
    (u,) = restore.units(doc, plan)
    assert "drop_deletes" not in u["segments"][0]
    assert u["segments"][1]["drop_deletes"] == [3] and u["segments"][1]["skip_rows"] == [1]
    assert u["segments"][1]["spans"] == {"insert_log/7/1/6/0/60": (0, 10), "insert_log/7/1/6/1/61": (0, 10)}
