"""A restore into Milvus imports a partition's segments per task (restore.units): restore._run
driven end to end against an in-memory etcd (compare-guarded txns, leases), real LocalStores
(backup target and the target's bucket) and a fake Milvus whose binlog import does what
Milvus 2.3's binlog_parser does: it walks every segment folder under the insert dir it is
given and imports each one found. A "kill" is an exception raised by the fake Milvus around
an Import call. What is checked: every segment of the bundle imported exactly once by
Completed tasks -- after kills, a resume by code with another group bound, a retry by the
per-segment code of the release before (a rollback), two runs of one restore at once.
(An adversarial helper's harness, session 19: these cases lost or duplicated segments
before the bound was recorded, the import phase had its own state and a run claimed its
restore.)"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from seglake.errors import Conflict
from seglake.meta.keys import Keys
from seglake.meta.kv import KeyValue, Put
from seglake.milvus import restore
from seglake.storage import layout
from seglake.storage.local import LocalStore

STAGING = "seglake-restore"
COLL = 7
PARTS = {1: "_default", 2: "p2"}


class Killed(BaseException):
    """The process died here (not an Exception: nothing catches it)."""


class FakeKV:
    def __init__(self):
        self.d: dict[str, KeyValue] = {}
        self.rev = 0
        self.leases: dict[int, set] = {}

    def grant_lease(self, ttl):
        lid = 1 + len(self.leases)
        self.leases[lid] = set()
        return lid

    def refresh_lease(self, lid):
        if lid not in self.leases:
            raise Conflict("lease not found")

    def lease_ttl(self, lid):
        return 5 if lid in self.leases else -1

    def revoke_lease(self, lid):
        for k in self.leases.pop(lid, ()):
            self.d.pop(k, None)

    def get(self, key):
        return self.d.get(key)

    def range(self, prefix, **_):
        return [v for k, v in sorted(self.d.items()) if k.startswith(prefix)]

    def put(self, key, value):
        self.txn([], [Put(key, value)])

    def txn(self, compares, ops, **_):
        for c in compares:
            cur = self.d.get(c.key)
            ok = (cur is None) if (c.target, c.value) == ("version", 0) else \
                 (cur is not None and cur.mod_revision == c.value) if c.target == "mod" else None
            if ok is None:
                raise AssertionError(f"compare {c} not modelled")
            if not ok:
                raise Conflict(f"txn compare failed on {c.key}")
        self.rev += 1
        for op in ops:
            if getattr(op, "lease", None):
                self.leases[op.lease].add(op.key)
            v = op.value.encode() if isinstance(op.value, str) else op.value
            old = self.d.get(op.key)
            self.d[op.key] = KeyValue(op.key, v, self.rev, old.create_revision if old else self.rev,
                                      (old.version + 1) if old else 1)


class FakeMilvus:
    """Import (backup mode) = Milvus 2.3's binlog parser: every segment folder under the
    insert dir (…/insert_log/C/P/ or …/insert_log/C/P/S/) with insert logs is imported."""

    def __init__(self, stage: LocalStore, plan: dict):
        self.stage, self.plan = stage, plan
        self.exists = False
        self.tasks: list[dict] = []
        self.imported: Counter = Counter()      # source segment id -> times imported
        self.kill_before_import = self.kill_after_import = None
        self.submits = 0
        self.on_submit = {}                     # submit number -> called before Milvus takes it

    def one(self, op):
        return self.call(op)[0]

    def call(self, *ops):
        return [self._op(o) for o in ops]

    def _schema(self):
        return {"id": 99, "shards": self.plan["shards"], "enable_dynamic_field": False,
                "partitions": sorted(set(self.plan["partitions"]) | {"_default"}),
                "fields": [{"name": f["name"], "field_id": f["field_id"], "data_type": f["data_type"],
                            "is_primary_key": bool(f.get("is_primary_key"))} for f in self.plan["schema"]["fields"]]}

    def _op(self, op):
        k = op["op"]
        if k == "has":
            return {"exists": self.exists}
        if k == "create_full":
            self.exists = True
            return {"id": 99}
        if k == "schema":
            return self._schema()
        if k == "version":
            return {"version": "v2.3.5"}
        if k == "list_imports":
            return [dict(t) for t in self.tasks]
        if k == "import":
            self.submits += 1
            n = self.submits
            hook = self.on_submit.pop(n, None)
            if hook is not None:
                hook()
            if self.kill_before_import == n:
                raise Killed(f"killed before import #{n} reached Milvus")
            ins = op["files"][0]
            assert ins.startswith(f"{STAGING}/") and ins.endswith("/")
            keys = [o.key for o in self.stage.list(ins[len(STAGING) + 1:])]
            segs = sorted({int(key.split("/")[-3]) for key in keys if "/insert_log/" in key})
            for s in segs:
                self.imported[s] += 1
            t = {"task_id": 1000 + len(self.tasks), "state": "Completed", "files": list(op["files"]),
                 # a row per segment read (not 0: a Completed import of 0 rows whose bundle
                 # rows the deletes do not all hide is a bucket Milvus does not read, attack-s25)
                 "row_count": len(segs), "failed_reason": "", "segments": segs, "partition": op["partition"]}
            self.tasks.append(t)
            if self.kill_after_import == n:
                raise Killed(f"killed after import #{n} reached Milvus, before its id was recorded")
            return {"task_id": t["task_id"]}
        if k == "import_state":
            return next(dict(t) for t in self.tasks if t["task_id"] == op["task_id"])
        if k in ("create_index", "load"):
            return {}
        raise AssertionError(f"op {k} not modelled")


class Target:
    staging = STAGING

    def __init__(self, stage):
        self._stage = stage

    def store(self):
        return self._stage

    def describe(self):
        return {"address": "fake:19530", "bucket": "b", "staging": STAGING}


def make_bundle(backup: LocalStore, sizes: dict[int, tuple[int, int]]) -> dict:
    """A capture: segments {sid: (partition id, bytes of its files)}, each with insert logs of
    fields 0, 1, 100 and one delete log; the files' bytes are in the backup target."""
    files, segs = {}, []
    for sid, (pid, size) in sizes.items():
        paths = [f"insert_log/{COLL}/{pid}/{sid}/{f}/{sid}{f}" for f in (0, 1, 100)] + \
                [f"delta_log/{COLL}/{pid}/{sid}/{sid}9"]
        for k, p in enumerate(paths):
            raw = (f"{p}|".encode() * size)[: max(1, size // 4)]
            sha = hashlib.sha256(raw).hexdigest()
            backup.put(layout.bundle_blob(sha), raw)
            files[p] = {"sha256": sha, "size": len(raw)}
        segs.append({"segment_id": sid, "partition_id": pid, "num_rows": 10,
                     "binlogs": [{"field_id": f, "logs": [{"path": paths[i], "entries": 10}]}
                                 for i, f in enumerate((0, 1, 100))],
                     "deltalogs": [{"logs": [{"path": paths[3]}]}]})
    return {"uid": "bundle-uid-1", "source": {"collection_id": COLL}, "files": files, "segments": segs,
            "snapshot": {"collection": {"partitions": [{"partition_id": p, "name": n} for p, n in PARTS.items()],
                                        "shards": 1}}}


def make_plan() -> dict:
    return {"rid": "rid1", "uid": "bundle-uid-1", "delete_fixes": {}, "converted": False, "shards": 1,
            "consistency_level": 0, "properties": {}, "partitions": list(PARTS.values()), "indexes": [],
            "schema": {"fields": [{"field_id": 100, "name": "pk", "data_type": 5, "is_primary_key": True}],
                       "auto_id": False, "description": "", "enable_dynamic_field": False}}


@pytest.fixture
def world(tmp_path, monkeypatch):
    backup, stage = LocalStore(tmp_path / "backup"), LocalStore(tmp_path / "bucket")
    plan = make_plan()
    w = SimpleNamespace(backup=backup, stage=stage, plan=plan, kv=FakeKV(), keys=Keys("seglake"),
                        milvus=FakeMilvus(stage, plan), target=Target(stage),
                        req=restore.Request(db="default", collection="c", bundle="b1", name="back", poll=0.05))
    monkeypatch.setattr(restore, "verify", lambda client, backup, doc, plan, req:
                        {"ok": True, "problems": [], "count": 0})
    monkeypatch.setattr(restore.faults, "point", lambda name: None)
    w.doc = None

    def run(mod=restore):
        mod_read = lambda backup, req: w.doc          # noqa: E731
        monkeypatch.setattr(mod, "read_bundle", mod_read)
        monkeypatch.setattr(mod, "verify", lambda client, backup, doc, plan, req: {"ok": True, "problems": [], "count": 0})
        return mod._run(w.kv, w.keys, w.backup, w.target, w.req, w.plan, w.milvus, time.time())

    w.run = run
    return w


def seg_ids(doc):
    return sorted(int(e["segment_id"]) for e in doc["segments"])


def assert_each_segment_once(w):
    assert dict(w.milvus.imported) == {s: 1 for s in seg_ids(w.doc)}, \
        f"times each source segment was imported: {dict(w.milvus.imported)}"


# -- what held ---------------------------------------------------------------------------------
def test_a_grouped_restore_imports_each_segment_once(world):
    w = world
    w.doc = make_bundle(w.backup, {11: (1, 400), 12: (2, 300), 13: (1, 500), 14: (1, 200)})
    rep = w.run()
    assert rep["state"] == "verified" and rep["imports"] == 2 and rep["segments"] == 4
    assert_each_segment_once(w)
    assert [o.key for o in w.stage.list("")] == []          # staged copies cleaned up


@pytest.mark.parametrize("kill", ["before", "after"])
def test_killed_around_the_import_call_then_rerun_imports_each_segment_once(world, kill):
    w = world
    w.doc = make_bundle(w.backup, {11: (1, 400), 12: (2, 300), 13: (1, 500), 14: (1, 200)})
    setattr(w.milvus, f"kill_{kill}_import", 2)
    with pytest.raises(Killed):
        w.run()
    rep = w.run()
    assert rep["state"] == "verified"
    assert_each_segment_once(w)
    assert len(w.milvus.tasks) == 2
    assert [o.key for o in w.stage.list("")] == []


def _old_restore_module():
    """restore.py as it was before 5d68da8 (the per-segment code, v1 records), from git."""
    repo = Path(__file__).resolve().parents[2]
    got = subprocess.run(["git", "-C", str(repo), "show", "5d68da8^:include/seglake/milvus/restore.py"],
                         capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"the release before 5d68da8 is not in this clone's git history: {got.stderr.strip()[:200]}")
    src = got.stdout
    spec = importlib.util.spec_from_loader("seglake_milvus_restore_v1", loader=None)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    exec(compile(src, "restore_v1.py", "exec"), mod.__dict__)
    return mod


@pytest.mark.parametrize("kill", ["before", "after"])
def test_a_v1_restore_killed_mid_import_resumes_per_segment(world, monkeypatch, kill):
    """Begun by the old code (one import per segment, "v": 1), killed around its 3rd Import;
    the new code finishes it per segment: each segment once, the old staging dirs."""
    w = world
    w.doc = make_bundle(w.backup, {11: (1, 400), 12: (2, 300), 13: (1, 500), 14: (1, 200)})
    old = _old_restore_module()
    monkeypatch.setattr(old.faults, "point", lambda name: None)
    setattr(w.milvus, f"kill_{kill}_import", 3)
    with pytest.raises(Killed):
        w.run(old)
    assert json.loads(w.kv.get(w.keys.milvus_restore("rid1")).value)["v"] == 1
    from seglake import console
    got = console._restore_segments(SimpleNamespace(kv=w.kv, keys=w.keys), "rid1")   # v1 records: no "segments"
    assert got == {"segments_total": 4, "segments_imported": 0, "segments_failed": 0}
    rep = w.run()
    assert rep["state"] == "verified" and rep["imports"] == 4
    assert_each_segment_once(w)
    assert all(t["files"][0].endswith(f"/{t['segments'][0]}/") for t in w.milvus.tasks)   # segment dirs
    assert [o.key for o in w.stage.list("")] == []          # v1 bases cleaned up


def test_console_counts_the_segments_of_unit_records(world):
    from seglake import console

    w = world
    w.doc = make_bundle(w.backup, {11: (1, 400), 12: (2, 300), 13: (1, 500), 14: (1, 200)})
    w.milvus.kill_after_import = 2
    with pytest.raises(Killed):
        w.run()
    got = console._restore_segments(SimpleNamespace(kv=w.kv, keys=w.keys), "rid1")
    assert got == {"segments_total": 4, "segments_imported": 0, "segments_failed": 0}


# -- what failed before the fixes ------------------------------------------------------------
@pytest.mark.parametrize("then", [450, 1 << 30])
def test_a_resume_under_another_group_bound_imports_each_segment_once(world, monkeypatch, then):
    """A restore begun with one bound (here 1000 B: units [11, 13] and [14]) and resumed by
    code with another (an upgrade changing the constant; 450: [11] [13] [14]; 1 GiB: [11, 13,
    14]) re-planned its units, matched to records by first segment id only: with 450 segment
    13 was imported twice, with 1 GiB segment 14 never. The restore records its bound and
    keeps it."""
    w = world
    w.doc = make_bundle(w.backup, {11: (1, 400), 13: (1, 500), 14: (1, 300)})
    monkeypatch.setattr(restore, "GROUP_BYTES", 1000)
    assert [[s["segment_id"] for s in u["segments"]] for u in restore.units(w.doc, w.plan)] == [[11, 13], [14]]
    w.milvus.kill_before_import = 2
    with pytest.raises(Killed):
        w.run()
    monkeypatch.setattr(restore, "GROUP_BYTES", then)
    assert w.run()["state"] == "verified"
    assert_each_segment_once(w)


def test_units_do_not_overlap_a_recorded_plan_with_stale_staged_folders(world, monkeypatch):
    """Killed after staging under one bound ([11, 13] staged under rid1/11/), resumed under a
    smaller one ([11], [13]): unit 11's import reads its partition dir, where segment 13's
    folder still is, and unit 13 imports 13 again."""
    w = world
    w.doc = make_bundle(w.backup, {11: (1, 400), 13: (1, 500)})
    monkeypatch.setattr(restore, "GROUP_BYTES", 1000)
    w.milvus.kill_before_import = 1
    with pytest.raises(Killed):
        w.run()
    monkeypatch.setattr(restore, "GROUP_BYTES", 450)
    assert w.run()["state"] == "verified"
    assert_each_segment_once(w)


def test_recorded_units_another_plan_would_not_make_are_refused(world, monkeypatch):
    """A unit record whose segments are not the planned unit's (here: the bound recorded in
    the restore record edited away) stops the run before any submit, naming the unit."""
    w = world
    w.doc = make_bundle(w.backup, {11: (1, 400), 13: (1, 500), 14: (1, 300)})
    monkeypatch.setattr(restore, "GROUP_BYTES", 1000)
    w.milvus.kill_before_import = 2
    with pytest.raises(Killed):
        w.run()
    key = w.keys.milvus_restore("rid1")
    rec = json.loads(w.kv.get(key).value)
    w.kv.put(key, json.dumps({**rec, "group_bytes": 1 << 30}))
    submits = w.milvus.submits
    with pytest.raises(Conflict, match="recorded import unit 11 is not one this run plans"):
        w.run()
    assert w.milvus.submits == submits


def test_old_code_resuming_a_grouped_restore_imports_each_segment_once(world, monkeypatch):
    """A rollback: a restore begun by the new code (v2, units [11, 13, 14]) and retried by the
    previous release (a DAG retry on a downgraded worker). The old code read the unit record
    11 as segment 11's and imported 13 and 14 again. The import phase is now the state
    `importing`, which the old code never acts on: it imports nothing; the new code finishes."""
    w = world
    w.doc = make_bundle(w.backup, {11: (1, 400), 13: (1, 500), 14: (1, 200), 12: (2, 300)})
    w.milvus.kill_before_import = 2       # unit [11, 13, 14] imported, unit [12] not yet
    with pytest.raises(Killed):
        w.run()
    old = _old_restore_module()
    monkeypatch.setattr(old.faults, "point", lambda name: None)
    submits = w.milvus.submits
    assert w.run(old)["state"] == "importing" and w.milvus.submits == submits
    assert w.run()["state"] == "verified"
    assert_each_segment_once(w)


def test_two_runs_of_one_restore_at_once_import_each_segment_once(world, monkeypatch):
    """The DAG allows two runs at once (max_active_runs=2; a form sent twice): run 1 records
    `submitting` and calls Import; before it reaches Milvus, run 2 read `submitting`, listed
    Milvus's imports (not there yet), recorded its own attempt and submitted: two tasks
    imported the same partition dirs. A run now claims its restore (a leased key): run 2
    waits, then is refused, naming the claim; nothing submitted by it."""
    w = world
    w.doc = make_bundle(w.backup, {11: (1, 400), 12: (2, 300), 13: (1, 500)})
    monkeypatch.setattr(restore, "RUN_LEASE_S", 0.3)
    seen = []

    def second_run():
        t0 = time.monotonic()
        with pytest.raises(Conflict, match="is being run by another process") as e:
            w.run()
        seen.append((time.monotonic() - t0, str(e.value)))

    w.milvus.on_submit[1] = second_run
    rep = w.run()
    assert rep["state"] == "verified" and len(seen) == 1 and seen[0][0] >= 0.5, seen
    assert_each_segment_once(w)
    assert w.kv.get(w.keys.milvus_restore_run("rid1")) is None      # the claim went with the run


class PkOnlyMilvus(FakeMilvus):
    """Milvus 2.3.0-2.3.3's backup import (milvus #29162): per segment folder, every row of a
    pk that folder's delete logs name is left out, whatever the timestamps."""

    def __init__(self, stage, plan):
        super().__init__(stage, plan)
        self.rows: list[tuple[int, int]] = []

    def _op(self, op):
        if op["op"] == "version":
            return {"version": "v2.3.3"}
        if op["op"] == "import":
            from seglake.milvus import binlog
            import io

            by_seg: dict = {}
            for kind, d in zip(("ins", "del"), op["files"]):
                for o in self.stage.list(d[len(STAGING) + 1:]):
                    raw = self.stage.get(o.key)
                    parts = o.key.split("/")
                    if kind == "ins":
                        by_seg.setdefault(int(parts[-3]), {}).setdefault(int(parts[-2]), binlog.column(io.BytesIO(raw), len(raw)))
                    else:
                        by_seg.setdefault(int(parts[-2]), {}).setdefault("del", []).extend(
                            pk for pk, _ in binlog.deletes(io.BytesIO(raw), len(raw)))
            for s, cols in by_seg.items():
                if 100 in cols:
                    gone = set(cols.get("del", []))
                    self.rows += [(pk, ts) for pk, ts in zip(cols[100], cols[1]) if pk not in gone]
        return super()._op(op)


def test_a_pre_234_target_gets_each_segments_fix_inside_a_group(world):
    """Segments 5 and 6 of one partition in one import; 6 holds an upsert of pk 3 (old row ts
    10, new row ts 20, delete (3, 20)), 5 the pk's first row (ts 5) hidden by (3, 20). Staged
    with pk_filter_fixes and imported by a pk-only filter per segment folder: exactly the
    bundle's visible rows."""
    from seglake.milvus import binlog_writer

    w = world
    segs = {5: ([3, 4], [5, 5], [(3, 20)]), 6: ([1, 3, 3], [10, 10, 20], [(3, 20)])}
    files, entries = {}, []
    for sid, (pks, tss, dels) in segs.items():
        logs = {}
        for f, vals in ((0, list(range(len(pks)))), (1, tss), (100, pks)):
            p = f"insert_log/{COLL}/1/{sid}/{f}/{sid}{f}"
            logs[f] = p
            raw = binlog_writer.insert_log(COLL, 1, sid, f, 5, vals, min(tss), max(tss))
            files[p] = raw
        dp = f"delta_log/{COLL}/1/{sid}/{sid}9"
        files[dp] = binlog_writer.delete_log(COLL, 1, sid, [d[0] for d in dels], [d[1] for d in dels])
        entries.append({"segment_id": sid, "partition_id": 1, "num_rows": len(pks),
                        "binlogs": [{"field_id": f, "logs": [{"path": logs[f], "entries": len(pks)}]} for f in (0, 1, 100)],
                        "deltalogs": [{"logs": [{"path": dp}]}]})
    meta = {}
    for p, raw in files.items():
        sha = hashlib.sha256(raw).hexdigest()
        w.backup.put(layout.bundle_blob(sha), raw)
        meta[p] = {"sha256": sha, "size": len(raw)}
    w.doc = {"uid": "bundle-uid-1", "source": {"collection_id": COLL}, "files": meta, "segments": entries,
             "snapshot": {"collection": {"partitions": [{"partition_id": p, "name": n} for p, n in PARTS.items()],
                                         "shards": 1, "schema": {"fields": w.plan["schema"]["fields"]}}}}
    w.plan["delete_fixes"] = restore.pk_filter_fixes(w.backup, w.doc, "Milvus 2.3.3")
    assert w.plan["delete_fixes"] == {"6": {"drop_deletes": [3], "skip_rows": [1]}}
    w.milvus = PkOnlyMilvus(w.stage, w.plan)
    rep = w.run()
    assert rep["imports"] == 1 and rep["segments"] == 2
    visible, n = restore.bundle_rows(w.backup, w.doc)
    assert n == 3 and sorted(w.milvus.rows) == sorted((pk, 5 if pk == 4 else (20 if pk == 3 else 10)) for pk in visible)
    assert sorted(w.milvus.rows) == [(1, 10), (3, 20), (4, 5)]
