"""Adversarial cases of session 25 against seglake's Milvus capture / restore (issue 29):
rows exact across a chain of incremental captures whose later links hold only deletes,
with a pk living in two partitions, and a retention prune + sweep of the earlier links
before the newest is restored. A real Milvus 2.3.5 (the worker's milvus_server)."""

from __future__ import annotations

import textwrap
import uuid

import pytest

import os
import time

from bundle_helper import TOY, attack_env, capture, pyrun, target_of
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import prune as prunes
from seglake.lifecycle.backup import verify as verifies
from seglake.milvus import restore

pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus]


@pytest.fixture
def env(etcd_server, milvus_server, s3_server, tmp_path):
    kv, keys, backup = attack_env(etcd_server, tmp_path)
    yield kv, keys, backup
    kv.close()


@pytest.fixture
def pm(milvus_python, milvus_server):
    return lambda code, **kw: pyrun(milvus_python, milvus_server.address, code, **kw)


def rows(pm, name) -> list:
    out = pm(f"OUT['r'] = rows_of({name!r}, 'pk >= 0', ['pk', 'v'])")["r"]
    return sorted((r["_partition"], r["pk"], r["v"]) for r in out)


def test_a_chain_whose_later_captures_hold_only_deletes_restores_each_link_exactly(env, pm, milvus_server, s3_server):
    """b1: two partitions, pks 50..59 in both. Then only deletes (a pk of each partition, a
    pk of both, a pk never inserted), flushed: b2 (incremental: no insert log copied again).
    Then an upsert of a pk in p1 and a delete of a pk still in a growing segment, flushed:
    b3. Each link restores to exactly the rows pymilvus returned on the source when it was
    captured. Then a retention prune keeping only the newest (and a sweep with no grace
    period) leaves b3 whole: it verifies and restores exactly once more."""
    kv, keys, backup = env
    src = f"dl_{uuid.uuid4().hex[:8]}"
    pm(TOY + textwrap.dedent(f"""
    c = toy({src!r}, parts=["p1"])
    put(c, range(0, 60), "a")
    c.flush()
    put(c, range(50, 80), "b", partition="p1")
    c.flush()
    """))
    want = {"b1": rows(pm, src)}
    doc1 = capture(milvus_server, s3_server, backup, src, bundle="b1")
    pm(textwrap.dedent(f"""
    c = Collection({src!r})
    c.delete("pk in [1, 2, 70, 55, 999]")
    c.flush()
    """))
    want["b2"] = rows(pm, src)
    doc2 = capture(milvus_server, s3_server, backup, src, bundle="b2")
    inserts1 = {x["path"] for e in doc1["segments"] for b in e["binlogs"] for x in b["logs"]}
    inserts2 = {x["path"] for e in doc2["segments"] for b in e["binlogs"] for x in b["logs"]}
    assert inserts1 == inserts2, "only deletes since b1: b2 should hold b1's insert logs"
    assert sum(len(b["logs"]) for e in doc2["segments"] for b in e["deltalogs"]) > \
        sum(len(b["logs"]) for e in doc1["segments"] for b in e["deltalogs"])
    pm(TOY + textwrap.dedent(f"""
    c = Collection({src!r})
    put(c, [100, 101], "g")                      # growing
    c.delete("pk in [100]")                       # deleted while still growing
    c.upsert([[60], ["up-60"], [[60.0, 9.0]]], partition_name="p1")
    c.flush()
    """))
    want["b3"] = rows(pm, src)
    capture(milvus_server, s3_server, backup, src, bundle="b3")
    assert len({tuple(v) for v in map(tuple, want.values())}) == 3, "each link should differ"

    def restored(bundle):
        name = f"r_{uuid.uuid4().hex[:10]}"
        rep = restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                          restore.Request("default", src, bundle, name, poll=0.2, sample=200))
        assert rep["ok"], rep
        got = rows(pm, name)
        pm(f"utility.drop_collection({name!r})")
        return got

    for b in ("b1", "b2", "b3"):
        got = restored(b)
        assert got == want[b], (f"{b}: restored rows differ from the source's when captured: "
                                f"missing {sorted(set(want[b]) - set(got))[:8]}, extra {sorted(set(got) - set(want[b]))[:8]}")
    old = time.time() - 7200        # every data file 2 h old: the sweep (its floor 1 h) judges them all
    for d, _, fs in os.walk(os.path.join(backup.root if hasattr(backup, "root") else backup.uri, "data")):
        for f in fs:
            os.utime(os.path.join(d, f), (old, old))
    rep = prunes.prune(backup, src, {"keep_last": 1}, db="default", min_age=3600, say=print)
    print("\nPRUNE", rep)
    with pytest.raises(Exception):
        bundles.read(backup, "default", src, "b1")
    v = verifies.verify(backup, src, "b3", say=print)
    assert v["ok"], v
    assert restored("b3") == want["b3"]


def test_a_killed_restore_whose_staged_files_were_removed_restages_them_on_its_rerun(env, pm, milvus_server,
                                                                                    s3_server):
    """A restore is killed once its units are staged, before any import was submitted; the
    files under the staging prefix are removed meanwhile (an operator clearing
    `seglake-restore/` after the failure, a bucket lifecycle rule). The re-run with the same
    arguments must stage them again and restore the rows. Seen before the fix: the re-run
    submitted imports of the absent directories; Milvus completed them with 0 rows; a unit
    with deletes passed (the 0-row guard exempts it), so the restore ended failing its own
    verify (count 29 of 68), its units recorded imported: every later re-run failed the
    same way, until the collection was dropped by hand (a unit without deletes: UnreadBucket,
    blaming the bucket, and the restore undone)."""
    from bundle_helper import s3_client
    from seglake import faults

    kv, keys, backup = env
    src = f"rs_{uuid.uuid4().hex[:8]}"
    pm(TOY + textwrap.dedent(f"""
    c = toy({src!r}, parts=["p1"])
    put(c, range(0, 40), "a")
    put(c, range(40, 70), "b", partition="p1")
    c.flush()
    c.delete("pk in [3, 41]")
    c.flush()
    """))
    want = rows(pm, src)
    capture(milvus_server, s3_server, backup, src, bundle="b1")
    name = f"r_{uuid.uuid4().hex[:10]}"
    target = target_of(milvus_server, s3_server)
    req = restore.Request("default", src, "b1", name, poll=0.2, sample=100, threads=1)
    with faults.inject("milvus_restore.after_stage"), pytest.raises(faults.InjectedFault):
        restore.run(kv, keys, backup, target, req)
    s3 = s3_client(s3_server)
    staged = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=target.bucket, Prefix=f"{target.staging}/") for o in page.get("Contents", [])]
    assert staged, "the killed run staged nothing: the test proves nothing"
    for k in staged:
        s3.delete_object(Bucket=target.bucket, Key=k)
    try:
        rep = restore.run(kv, keys, backup, target, req)
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"the re-run after the staged files were removed: {type(e).__name__}: {e}")
    assert rep["ok"], rep
    assert rows(pm, name) == want


def test_a_target_bucket_milvus_does_not_read_is_named_when_every_segment_has_deletes(env, pm, milvus_server,
                                                                                      s3_server):
    """As attack-s20's wrong-bucket case, but the source's one segment has deletes (the
    common case: a collection someone deleted from). Milvus's bulk insert of the (for it)
    absent dirs ends Completed with 0 rows; the bundle's deletes hide 2 of 50 rows, so 0
    is not what a real import gives. The restore should name the bucket and undo itself
    (the same name then restores from the right bucket), not import nothing, fail its
    verify naming no bucket, and leave an empty collection holding the name."""
    import json
    from bundle_helper import s3_client

    kv, keys, backup = env
    small = f"sd_{uuid.uuid4().hex[:8]}"
    pm(TOY + textwrap.dedent(f"""
    c = toy({small!r})
    put(c, range(0, 50), "a")
    c.delete("pk in [7, 8]")
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
    assert other in str(e.value) and "completed with 0 of its 50 rows" in str(e.value), str(e.value)[:400]
    assert "nothing of this restore is left" in str(e.value), str(e.value)[:400]
    assert left is False
    assert not [k for k in kv.range(keys.milvus_restores_prefix()) if json.loads(k.value).get("name") == y]
    rep = restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                      restore.Request("default", small, "b1", y, poll=0.2))
    assert rep["state"] == "verified" and rep["count"] == 48, rep
