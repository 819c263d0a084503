"""Adversarial cases of session 20 against seglake's Milvus capture / restore (issue 29).
A real Milvus 2.3.5 (the worker's milvus_server), its etcd and SeaweedFS."""

from __future__ import annotations

import json
import textwrap
import uuid

import pytest

from bundle_helper import TOY, MilvusS3Settings, attack_env, capture, pyrun, target_of
from seglake.errors import Conflict
from seglake.meta.kv import KV
from seglake.milvus import capture as captures
from seglake.milvus import restore
from seglake.milvus.proto import fields, one, signed
from seglake.lifecycle.backup import bundle as bundles

pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus]


@pytest.fixture
def env(etcd_server, milvus_server, s3_server, tmp_path):
    kv, keys, backup = attack_env(etcd_server, tmp_path)
    yield kv, keys, backup
    kv.close()


@pytest.fixture
def pm(milvus_python, milvus_server):
    return lambda code, **kw: pyrun(milvus_python, milvus_server.address, code, **kw)


def cid_of(milvus_server, name):
    from seglake.milvus.etcdmeta import MilvusMeta
    with KV(milvus_server.etcd_endpoint, timeout=10) as mkv:
        return MilvusMeta(mkv, milvus_server.etcd_root).collection(name).id


def seg_history(milvus_server, cid, r0, r1):
    """[(revision, {segment id: (state, rows, is_importing, compacted)})] at each revision in r0..r1 where it changed."""
    out, last = [], None
    with KV(milvus_server.etcd_endpoint, timeout=10) as mkv:
        pre = milvus_server.etcd_root.rstrip("/") + f"/meta/datacoord-meta/s/{cid}/"
        for r in range(r0, r1 + 1):
            segs = {}
            for item in mkv.range(pre, revision=r):
                if bytes(item.value) == b"\xe2\x9b\xbc":
                    continue
                f = fields(item.value)
                segs[signed(one(f, 1, 0))] = (one(f, 6, 0), signed(one(f, 5, 0)), one(f, 17, 0), one(f, 19, 0))
            if segs != last:
                out.append((r, segs))
                last = segs
    return out


def flushed_rows(segs):
    return sum(rows for st, rows, imp, comp in segs.values() if st == 4)


class AtRevision:
    """Milvus's etcd as a capture that started at revision `rev` sees it (every read of a
    capture is at the revision kv.revision() gave when it began)."""

    def __init__(self, kv, rev):
        self._kv, self._rev = kv, rev

    def revision(self):
        return self._rev

    def __getattr__(self, k):
        return getattr(self._kv, k)


def capture_at(milvus_server, s3_server, backup, name, bundle, rev):
    bucket = captures.open_bucket(MilvusS3Settings(s3_server), milvus_server.s3.bucket, milvus_server.s3.root_path)
    with KV(milvus_server.etcd_endpoint, timeout=10) as kv:
        captures.capture(AtRevision(kv, rev), bucket, backup, milvus_server.etcd_root, [name], bundle=bundle,
                         threads=4, source={"bucket": milvus_server.s3.bucket, "root_path": milvus_server.s3.root_path})
    return bundles.read(backup, "default", name, bundle)


def test_a_capture_while_milvus_compacts_holds_every_row(env, pm, milvus_server, s3_server):
    """Milvus 2.3 completes a compaction in one etcd txn that marks the input segments
    Dropped and writes the output segment in state Flushing (5); a moment later it becomes
    Flushed. Milvus serves the rows all along (count(*) 120 before, during, after). A
    capture whose revision falls between those two writes reads only state Flushed: it
    commits a bundle without the compacted rows."""
    kv, keys, backup = env
    src = f"cx_{uuid.uuid4().hex[:8]}"
    pm(TOY + textwrap.dedent(f"""
    c = toy({src!r})
    for k in range(3):
        put(c, range(k * 40, k * 40 + 40), "a")
        c.flush()
    c.create_index("vec", {{"index_type": "FLAT", "metric_type": "L2", "params": {{}}}})
    utility.wait_for_index_building_complete({src!r})
    """))
    cid = cid_of(milvus_server, src)
    with KV(milvus_server.etcd_endpoint, timeout=10) as mkv:
        r0 = mkv.revision()
    for _ in range(10):
        pm(f"c = Collection({src!r}); c.compact(); c.wait_for_compaction_completed(timeout=120)")
        with KV(milvus_server.etcd_endpoint, timeout=10) as mkv:
            r1 = mkv.revision()
        hist = seg_history(milvus_server, cid, r0, r1)
        mid = [r for r, segs in hist if any(st == 5 for st, *_ in segs.values())]
        if mid:
            break
    else:
        pytest.fail("Milvus did not compact in 10 tries")
    n = pm(TOY + f"Collection({src!r}).load(); OUT['n'] = count({src!r})")["n"]
    assert n == 120
    doc = capture_at(milvus_server, s3_server, backup, src, "during", mid[0])
    print("\nCAPTURE AT", mid[0], "rows", doc["totals"]["rows"], "segments", doc["totals"]["segments"])
    assert doc["totals"]["rows"] == 120, (f"a capture at etcd revision {mid[0]} (a compaction being completed) "
                                          f"committed {doc['totals']['rows']} rows; Milvus holds 120")


def test_a_capture_during_a_bulk_insert_leaves_out_the_importing_segment(env, pm, milvus_server, s3_server):
    """A bulk insert's segment is Flushed with is_importing set until its import is done;
    Milvus serves none of its rows until then (GetRecoveryInfo skips it) and drops it if the
    import fails. A capture at such a revision must not hold those rows."""
    kv, keys, backup = env
    src = f"im_{uuid.uuid4().hex[:8]}"
    pm(TOY + textwrap.dedent(f"""
    c = toy({src!r})
    put(c, range(0, 300), "a")
    c.flush()
    """))
    capture(milvus_server, s3_server, backup, src, bundle="b1")
    new = f"r_{uuid.uuid4().hex[:8]}"
    with KV(milvus_server.etcd_endpoint, timeout=10) as mkv:
        r0 = mkv.revision()
    restore.run(kv, keys, backup, target_of(milvus_server, s3_server), restore.Request("default", src, "b1", new, poll=0.2))
    with KV(milvus_server.etcd_endpoint, timeout=10) as mkv:
        r1 = mkv.revision()
    hist = seg_history(milvus_server, cid_of(milvus_server, new), r0, r1)
    importing = [r for r, segs in hist if any(st == 4 and imp for st, rows, imp, _ in segs.values())]
    assert importing, hist
    doc = capture_at(milvus_server, s3_server, backup, new, "during", importing[0])
    print("\nCAPTURE AT", importing[0], "rows", doc["totals"]["rows"])
    assert doc["totals"]["rows"] == 0, (f"a capture at etcd revision {importing[0]} (an import not done: Milvus serves "
                                        f"none of its rows) holds {doc['totals']['rows']} rows")


def test_a_local_milvus_bucket_root_that_is_not_there_is_not_created(tmp_path, s3_server):
    """Milvus's local storage (an absolute --bucket) with a --milvus-bucket-root that does not
    exist there (a typo): the capture must not create it -- it is strictly read-only on Milvus."""
    storage = tmp_path / "milvus-local"
    storage.mkdir()
    (storage / "files").mkdir()
    before = sorted(p.relative_to(storage).as_posix() for p in storage.rglob("*"))
    try:
        captures.open_bucket(MilvusS3Settings(s3_server), str(storage), "filez/typo")
    except Exception as e:   # noqa: BLE001 - a refusal is fine
        print("\nREFUSED", type(e).__name__, e)
    after = sorted(p.relative_to(storage).as_posix() for p in storage.rglob("*"))
    assert after == before, f"the capture created {sorted(set(after) - set(before))} in Milvus's local storage"


def test_a_pk_inserted_170_times_restores_and_verifies(env, pm, milvus_server, s3_server):
    """100 pks, each inserted 170 times (an ingest re-run with insert, not upsert): Milvus keeps
    every copy (count(*) 17000). The restore imports them all; verify must not ask Milvus for
    more than its query window (offset+limit <= 16384) in one query."""
    kv, keys, backup = env
    dup = f"dup_{uuid.uuid4().hex[:8]}"
    pm(TOY + textwrap.dedent(f"""
    c = toy({dup!r})
    for k in range(170):
        put(c, range(0, 100), "a")
    c.flush()
    """))
    capture(milvus_server, s3_server, backup, dup, bundle="b1")
    rep = restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                      restore.Request("default", dup, "b1", f"r_{uuid.uuid4().hex[:8]}", poll=0.2))
    assert rep["state"] == "verified" and rep["count"] == 17000 and rep["sampled"] == 100, rep


def test_a_sample_larger_than_the_query_window_verifies(env, pm, milvus_server, s3_server):
    """Request.check takes sample up to 100000; 16500 pks sampled must not be one query of limit 16501."""
    kv, keys, backup = env
    big = f"big_{uuid.uuid4().hex[:8]}"
    pm(TOY + textwrap.dedent(f"""
    c = toy({big!r})
    put(c, range(0, 16500), "a")
    c.flush()
    c.delete("pk in [1, 2, 3]")
    c.flush()
    """))
    capture(milvus_server, s3_server, backup, big, bundle="b1")
    rep = restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                      restore.Request("default", big, "b1", f"r_{uuid.uuid4().hex[:8]}", poll=0.2, sample=16497))
    assert rep["state"] == "verified" and rep["count"] == 16497 and rep["sampled"] == 16497, rep


def test_nan_in_float_and_double_fields_verifies(env, pm, milvus_server, s3_server):
    """Milvus 2.3.5 takes NaN and +-inf in FLOAT / DOUBLE scalars; the restored rows are the
    same, so verify must pass (NaN != NaN is no difference)."""
    kv, keys, backup = env
    nan = f"nan_{uuid.uuid4().hex[:8]}"
    pm(textwrap.dedent(f"""
    c = Collection({nan!r}, CollectionSchema([FieldSchema("pk", DataType.INT64, is_primary=True),
                                           FieldSchema("f", DataType.FLOAT), FieldSchema("d", DataType.DOUBLE),
                                           FieldSchema("vec", DataType.FLOAT_VECTOR, dim=2)]), shards_num=1)
    c.insert([[1, 2, 3], [float("nan"), float("inf"), 1.5], [float("nan"), float("-inf"), 2.5],
              [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]])
    c.flush()
    """))
    capture(milvus_server, s3_server, backup, nan, bundle="b1")
    rep = restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                      restore.Request("default", nan, "b1", f"r_{uuid.uuid4().hex[:8]}", poll=0.2))
    assert rep["state"] == "verified" and rep["count"] == 3, rep


def test_a_name_restored_into_then_dropped_can_be_restored_into_again(env, pm, milvus_server, s3_server):
    """Restore b1 into X, the user drops X, then restores (b1 again, or b2) into X: the name is
    free in Milvus; the restore runs (or is refused with a clear message, not a raw pymilvus error)."""
    kv, keys, backup = env
    small = f"sm_{uuid.uuid4().hex[:8]}"
    pm(TOY + textwrap.dedent(f"""
    c = toy({small!r})
    put(c, range(0, 50), "a")
    c.flush()
    """))
    capture(milvus_server, s3_server, backup, small, bundle="b1")
    x = f"x_{uuid.uuid4().hex[:8]}"
    rep = restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                      restore.Request("default", small, "b1", x, poll=0.2))
    assert rep["state"] == "verified"
    pm(f"utility.drop_collection({x!r})")
    try:
        rep = restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                          restore.Request("default", small, "b1", x, poll=0.2))
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"restoring into {x!r} again after it was dropped: {type(e).__name__}: {str(e)[:300]}")
    assert rep["state"] == "verified" and rep["count"] == 50, rep


def test_a_target_bucket_milvus_does_not_read_is_named(env, pm, milvus_server, s3_server):
    """The target's bucket is listable but not the one the target Milvus reads: Milvus's
    bulk insert of the (for it) absent dirs ends Completed with 0 rows. The restore should
    stop naming the bucket, not end in a verify failure that names none."""
    from bundle_helper import s3_client
    kv, keys, backup = env
    small = f"sm_{uuid.uuid4().hex[:8]}"
    pm(TOY + textwrap.dedent(f"""
    c = toy({small!r})
    put(c, range(0, 50), "a")
    c.flush()
    """))
    capture(milvus_server, s3_server, backup, small, bundle="b1")
    s3 = s3_client(s3_server)
    other = f"other-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=other)
    y = f"y_{uuid.uuid4().hex[:8]}"
    t = restore.MilvusTarget(address=milvus_server.address, bucket=other, s3_endpoint=s3_server.endpoint,
                             s3_access_key=s3_server.access_key, s3_secret_key=s3_server.secret_key)
    with pytest.raises(restore.MilvusRestoreError) as e:
        restore.run(kv, keys, backup, t, restore.Request("default", small, "b1", y, poll=0.2, import_timeout=120))
    left = pm(f"OUT['has'] = utility.has_collection({y!r})")["has"]
    staged = s3.list_objects_v2(Bucket=other).get("KeyCount", 0)
    print("\nWRONG BUCKET:", str(e.value)[:300], "| collection left:", left, "| staged objects left:", staged)
    assert other in str(e.value) and "completed with 0 of its 50 rows" in str(e.value), str(e.value)[:300]
    # ... and leaves nothing behind (session 23): no collection, no staged file, no record: the
    # same name restores from the right bucket at once
    assert "nothing of this restore is left" in str(e.value), str(e.value)
    assert (left, staged) == (False, 0)
    assert not [k for k in kv.range(keys.milvus_restores_prefix())
                if json.loads(k.value).get("name") == y]
    rep = restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                      restore.Request("default", small, "b1", y, poll=0.2))
    assert rep["state"] == "verified" and rep["count"] == 50, rep


def test_a_restore_killed_while_undoing_a_wrong_bucket_finishes_the_undo_on_its_rerun(env, pm, milvus_server,
                                                                                       s3_server, monkeypatch):
    """The undo of a wrong-bucket restore dies before its drop (a kill there): the record says
    `abandoning`; the re-run finishes the undo (the collection dropped, the record gone) and
    says the same, never importing again."""
    from bundle_helper import s3_client
    from seglake.milvus import client as mclient
    kv, keys, backup = env
    small = f"sm_{uuid.uuid4().hex[:8]}"
    pm(TOY + f"c = toy({small!r}); put(c, range(0, 30), 'a'); c.flush()")
    capture(milvus_server, s3_server, backup, small, bundle="b1")
    s3 = s3_client(s3_server)
    other = f"other-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=other)
    y = f"y_{uuid.uuid4().hex[:8]}"
    t = restore.MilvusTarget(address=milvus_server.address, bucket=other, s3_endpoint=s3_server.endpoint,
                             s3_access_key=s3_server.access_key, s3_secret_key=s3_server.secret_key)
    req = restore.Request("default", small, "b1", y, poll=0.2, import_timeout=120)
    real_one = mclient.MilvusClient.one

    def killed_at_drop(self, op):
        if op.get("op") == "drop":
            raise KeyboardInterrupt("killed before the drop")
        return real_one(self, op)
    monkeypatch.setattr(mclient.MilvusClient, "one", killed_at_drop)
    with pytest.raises(KeyboardInterrupt):
        restore.run(kv, keys, backup, t, req)
    monkeypatch.undo()
    (rec,) = [json.loads(k.value) for k in kv.range(keys.milvus_restores_prefix()) if json.loads(k.value)["name"] == y]
    assert rec["state"] == "abandoning"
    assert pm(f"OUT['has'] = utility.has_collection({y!r})")["has"]
    with pytest.raises(restore.UnreadBucket, match="nothing of this restore is left"):
        restore.run(kv, keys, backup, t, req)
    assert not pm(f"OUT['has'] = utility.has_collection({y!r})")["has"]
    assert s3.list_objects_v2(Bucket=other).get("KeyCount", 0) == 0
    assert not [k for k in kv.range(keys.milvus_restores_prefix()) if json.loads(k.value)["name"] == y]


def test_a_capture_while_a_flush_is_being_completed_holds_the_segment(env, pm, milvus_server, s3_server):
    """A flushed segment is Flushing (5) for a moment after its binlogs are saved: a capture at
    that revision now takes it (the fix of the compaction window) and must find it whole."""
    kv, keys, backup = env
    src = f"fl_{uuid.uuid4().hex[:8]}"
    pm(TOY + f"c = toy({src!r})")
    cid = cid_of(milvus_server, src)
    with KV(milvus_server.etcd_endpoint, timeout=10) as mkv:
        r0 = mkv.revision()
    pm(TOY + f"c = Collection({src!r}); put(c, range(0, 40), 'a'); c.flush(); c.delete('pk in [3, 4]'); c.flush()")
    with KV(milvus_server.etcd_endpoint, timeout=10) as mkv:
        r1 = mkv.revision()
    hist = seg_history(milvus_server, cid, r0, r1)
    mid = [r for r, segs in hist if any(st == 5 for st, *_ in segs.values())]
    assert mid, hist
    doc = capture_at(milvus_server, s3_server, backup, src, "during", mid[0])
    vis, n = restore.bundle_rows(backup, doc)
    print("\nFLUSHING CAPTURE", mid[0], doc["totals"], n)
    assert doc["totals"]["rows"] == 40


@pytest.mark.parametrize("pk_name", ["like", "true"])
def test_a_pk_named_like_a_keyword_restores_and_verifies(env, pm, milvus_server, s3_server, pk_name):
    """Milvus 2.3.5 takes a pk field named `like` (also in, and, exists, json_contains, true):
    the restore should verify it, or refuse it before writing anything -- not fail after."""
    kv, keys, backup = env
    src = f"kw_{uuid.uuid4().hex[:8]}"
    pm(textwrap.dedent(f"""
    c = Collection({src!r}, CollectionSchema([FieldSchema({pk_name!r}, DataType.INT64, is_primary=True),
                                           FieldSchema("vec", DataType.FLOAT_VECTOR, dim=2)]), shards_num=1)
    c.insert([[1, 2, 3], [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]])
    c.flush()
    """))
    capture(milvus_server, s3_server, backup, src)
    new = f"r_{uuid.uuid4().hex[:8]}"
    try:
        rep = restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                          restore.Request("default", src, "b1", new, poll=0.2))
    except restore.MilvusRestoreError as e:   # refused: acceptable only before anything was written
        assert not pm(f"OUT['has'] = utility.has_collection({new!r})")["has"], f"refused after creating {new}: {e}"
        return
    assert rep["state"] == "verified" and rep["count"] == 3, rep


def test_a_retention_prune_during_a_restore_does_not_pull_the_bundle_away(env, pm, milvus_server, s3_server,
                                                                             monkeypatch):
    """An operator restores an old capture (b1) while the retention prune runs (keep_last 1:
    b1 is the one it drops). seglake's own restore and import hold their bundle (holds.held:
    the prune keeps a held bundle); the Milvus restore should too. The data files of an old
    bundle are old, so the prune's sweep removes them at once."""
    import os
    import time as _time
    from seglake.lifecycle.backup import prune as prunes

    kv, keys, backup = env
    src = f"pr_{uuid.uuid4().hex[:8]}"
    pm(TOY + textwrap.dedent(f"""
    c = toy({src!r})
    put(c, range(0, 60), "old")
    c.flush()
    """))
    capture(milvus_server, s3_server, backup, src, bundle="b1")
    pm(TOY + textwrap.dedent(f"""
    utility.drop_collection({src!r})
    c = toy({src!r})
    put(c, range(100, 130), "new")
    c.flush()
    """))
    _time.sleep(1.1)
    capture(milvus_server, s3_server, backup, src, bundle="b2")
    old = _time.time() - 2 * 86400          # b1's data files written two days ago
    for root, _, files in os.walk(os.path.join(backup.uri, "data")):
        for f in files:
            os.utime(os.path.join(root, f), (old, old))
    pruned = {}
    real_stage = restore._stage

    def stage_while_pruned(*a, **kw):
        if not pruned:
            pruned.update(prunes.prune(backup, src, {"keep_last": 1}, min_age=3600, say=print))
        return real_stage(*a, **kw)

    monkeypatch.setattr(restore, "_stage", stage_while_pruned)
    new = f"r_{uuid.uuid4().hex[:8]}"
    err = None
    try:
        rep = restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                          restore.Request("default", src, "b1", new, poll=0.2))
    except Exception as e:  # noqa: BLE001
        err, rep = e, None
    print("\nPRUNE", pruned.get("pruned"), pruned.get("held"), "| RESTORE", rep and rep["state"],
          type(err).__name__ if err else "", str(err)[:300] if err else "")
    assert "b1" not in (pruned.get("pruned") or []), f"the prune dropped b1 while it was being restored ({err})"
    assert err is None and rep["state"] == "verified" and rep["count"] == 60


def test_upserts_deletes_reinserts_under_auto_compaction_round_trip(env, pm, milvus_server, s3_server):
    """pks 0..29 upserted 12 times each across flushes (many small segments: the worker's Milvus
    compacts them on its own), some deleted then inserted again, one delete left unflushed:
    the capture of a Flushed view restores to the rows Milvus shows after a final flush."""
    kv, keys, backup = env
    src = f"up_{uuid.uuid4().hex[:8]}"
    pm(TOY + textwrap.dedent(f"""
    import time
    c = toy({src!r}, shards=2)
    c.create_index("vec", {{"index_type": "FLAT", "metric_type": "L2", "params": {{}}}})
    c.load()
    put(c, range(0, 30), "v0")
    c.flush()
    for k in range(1, 13):
        c.upsert([list(range(0, 30)), [f"v{{k}}-{{p}}" for p in range(30)], [[float(p), float(k)] for p in range(30)]])
        if k % 3 == 0:
            c.delete("pk in [5, 6, 7]")
        if k % 4 == 0:
            put(c, [5, 6], f"re{{k}}")
        c.flush()
    time.sleep(3)
    c.flush()
    """), timeout=600)
    capture(milvus_server, s3_server, backup, src, bundle="b1")
    new = f"r_{uuid.uuid4().hex[:8]}"
    rep = restore.run(kv, keys, backup, target_of(milvus_server, s3_server), restore.Request("default", src, "b1", new, poll=0.2))
    got = pm(TOY + textwrap.dedent(f"""
    OUT["src"] = sorted(rows_of({src!r}, "pk >= 0", ["pk", "v", "vec"]), key=lambda r: r["pk"])
    OUT["new"] = sorted(rows_of({new!r}, "pk >= 0", ["pk", "v", "vec"]), key=lambda r: r["pk"])
    OUT["n"] = [count({src!r}), count({new!r})]
    """))
    print("\nUPSERT", rep["state"], rep["count"], got["n"], len(got["src"]), len(got["new"]))
    assert got["src"] == got["new"]
    assert got["n"][0] == got["n"][1] == rep["count"]


@pytest.fixture(scope="module")
def msync(milvus_python, etcd_server, s3_server, tmp_path_factory):
    """A Milvus whose data node syncs a growing segment's buffer every second: a segment gets
    several insert logs per field and delete logs before it is flushed."""
    from tests.milvus.conftest import own_milvus
    yield from own_milvus(etcd_server, s3_server, tmp_path_factory, "milvus-test", "sync",
                          config={"dataNode.segment.syncPeriod": "1"})


def test_segments_synced_many_times_before_the_flush_round_trip(env, msync, milvus_python, s3_server):
    kv, keys, backup = env
    spm = lambda code, **kw: pyrun(milvus_python, msync.address, code, **kw)  # noqa: E731
    src = f"sy_{uuid.uuid4().hex[:8]}"
    spm(TOY + textwrap.dedent(f"""
    import time
    c = toy({src!r}, ["p1"], shards=2)
    c.create_index("vec", {{"index_type": "FLAT", "metric_type": "L2", "params": {{}}}})
    c.load()
    for k in range(5):
        put(c, range(k * 50, k * 50 + 50), f"a{{k}}")
        put(c, range(1000 + k * 10, 1000 + k * 10 + 10), f"p{{k}}", "p1")
        time.sleep(2.5)
        c.delete(f"pk in [{{k * 50}}, {{k * 50 + 1}}, 1001]")
        c.upsert([[k * 50 + 2], [f"u{{k}}"], [[0.5, 0.5]]])
        time.sleep(2.5)
    c.flush()
    """), timeout=600)
    doc = capture(msync, s3_server, backup, src)
    multi = [(e["segment_id"], len(e["binlogs"][0]["logs"]), sum(len(d["logs"]) for d in e["deltalogs"]))
             for e in doc["segments"]]
    print("\nSYNC segments (id, insert logs per field, delete logs):", multi)
    new = f"r_{uuid.uuid4().hex[:8]}"
    rep = restore.run(kv, keys, backup, target_of(msync, s3_server), restore.Request("default", src, "b1", new, poll=0.2))
    got = spm(TOY + textwrap.dedent(f"""
    OUT["src"] = sorted(rows_of({src!r}, "pk >= 0", ["pk", "v", "vec"]), key=lambda r: (r["_partition"], r["pk"]))
    OUT["new"] = sorted(rows_of({new!r}, "pk >= 0", ["pk", "v", "vec"]), key=lambda r: (r["_partition"], r["pk"]))
    OUT["n"] = [count({src!r}), count({new!r})]
    """))
    print("SYNC", rep["state"], rep["count"], got["n"])
    assert any(m[1] > 1 for m in multi), "no segment with several insert logs: the test proves nothing"
    assert got["src"] == got["new"] and got["n"][0] == got["n"][1] == rep["count"]


def test_one_bundle_restored_under_two_names_at_once_and_a_third_run_on_one_of_them(env, pm, milvus_server, s3_server):
    """Two restores of one bundle at the same time under two names (two threads, two clients),
    and a second run of the first one meanwhile: both names end verified with the source's rows,
    the second run of the same name is refused or finds it done -- never a double import."""
    import threading
    kv, keys, backup = env
    src = f"tw_{uuid.uuid4().hex[:8]}"
    pm(TOY + textwrap.dedent(f"""
    c = toy({src!r}, ["p1"], shards=2)
    put(c, range(0, 200), "a")
    put(c, range(500, 560), "b", "p1")
    c.flush()
    c.delete("pk in [3, 501]")
    c.flush()
    """))
    capture(milvus_server, s3_server, backup, src)
    names = [f"r_{uuid.uuid4().hex[:8]}", f"r_{uuid.uuid4().hex[:8]}"]
    out = {}

    def go(tag, name):
        try:
            out[tag] = restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                                   restore.Request("default", src, "b1", name, poll=0.2))
        except Exception as e:  # noqa: BLE001
            out[tag] = e
    ts = [threading.Thread(target=go, args=("a", names[0])), threading.Thread(target=go, args=("b", names[1])),
          threading.Thread(target=go, args=("a2", names[0]))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(600)
    print("\nTWO", {k: (v["state"], v["count"]) if isinstance(v, dict) else f"{type(v).__name__}: {str(v)[:200]}"
                    for k, v in out.items()})
    n = pm(TOY + f"Collection({src!r}).create_index('vec', {{'index_type': 'FLAT', 'metric_type': 'L2', 'params': {{}}}}); "
              f"Collection({src!r}).load(); OUT['n'] = [count({src!r}), count({names[0]!r}), count({names[1]!r})]")["n"]
    print("COUNTS", n)
    assert n[0] == n[1] == n[2] == 258
    assert isinstance(out["b"], dict) and out["b"]["state"] == "verified"
    # the two runs of names[0] race for its claim: whichever wins verifies, the other finds it
    # done or is refused while the winner holds the claim (never a second import: counts above)
    runs = [out["a"], out["a2"]]
    assert any(isinstance(r, dict) and r["state"] == "verified" for r in runs), runs
    assert all(isinstance(r, dict) or (isinstance(r, Conflict) and "being run by another process" in str(r))
               for r in runs), runs


def test_two_restores_from_two_databases_into_one_new_name(env, pm, milvus_server, s3_server, monkeypatch):
    """Bundles default.A/b1 (40 rows) and D.A/b1 (30 rows, same schema) restored at the same time
    into one new name X. The restore id hashes the *bundle's* db, so the two runs hold two
    claims; interleaved as: both pass check, A creates X, B then meets X in state creating and
    adopts it (same schema, no import yet). Expected: one restore of X, the other refused."""
    import threading
    kv, keys, backup = env
    a = f"da_{uuid.uuid4().hex[:8]}"
    dbn = f"d{uuid.uuid4().hex[:6]}"
    pm(TOY + f"c = toy({a!r}); put(c, range(0, 40), 'a'); c.flush()")
    pm(TOY + f"db.create_database({dbn!r}); db.using_database({dbn!r}); c = toy({a!r}); put(c, range(100, 130), 'b'); c.flush()")
    capture(milvus_server, s3_server, backup, a)
    capture(milvus_server, s3_server, backup, a, db=dbn)
    x = f"x_{uuid.uuid4().hex[:8]}"
    real = restore._create
    b_arrived, a_created, b_created = threading.Event(), threading.Event(), threading.Event()

    def create(recs, client, target, req, plan):
        if req.db == "default":
            b_arrived.wait(60)
            out = real(recs, client, target, req, plan)
            a_created.set()
            b_created.wait(60)
            return out
        b_arrived.set()
        a_created.wait(60)
        try:
            return real(recs, client, target, req, plan)
        finally:
            b_created.set()

    monkeypatch.setattr(restore, "_create", create)
    out = {}

    def go(db):
        try:
            out[db] = restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                                  restore.Request(db, a, "b1", x, poll=0.2))
        except Exception as e:  # noqa: BLE001
            out[db] = e
    ts = [threading.Thread(target=go, args=(d,)) for d in ("default", dbn)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(600)
    n = pm(TOY + f"Collection({x!r}).load(); OUT['n'] = count({x!r})")["n"]
    res = {k: (v["state"], v["count"]) if isinstance(v, dict) else f"{type(v).__name__}: {str(v)[:160]}"
           for k, v in out.items()}
    print("\nTWO DBS", res, "X count", n)
    for item in kv.range(keys.milvus_restores_prefix()):
        print("REC", item.key[-30:], item.value[:400])
    imps = pm(f"OUT['t'] = [[t.task_id, t.state_name, t.row_count, t.files, t.infos] for t in utility.list_bulk_insert_tasks(limit=0, collection_name={x!r})]")
    print("IMPORTS", imps)
    done = [t for t in imps["t"] if t[1] == "Completed"]
    assert len(done) == 1, (f"{len(done)} imports of {[t[2] for t in done]} rows went into X, one per restore "
                            f"(X count {n} so far; {res})")
    assert n in (40, 30) and sum(isinstance(v, dict) for v in out.values()) == 1, res
