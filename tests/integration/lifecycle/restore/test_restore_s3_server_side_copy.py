"""Restore on S3 at object-store speed: copies are server-side (CopyObject, UploadPartCopy
above MAX_COPY_OBJECT), many in flight per runner, and no object's bytes pass through
the runner. Real etcd + real SeaweedFS; moto only where AWS's own answers are needed
(part ETags that are MD5s) and for error injection."""

from __future__ import annotations

import collections
import hashlib
import os
import threading
import time

import pytest

from seglake.dev import demo
from seglake.config import Settings
from seglake.lifecycle import copyjob, restore, snapshot, verify
from seglake.meta.copyjobs import JOB_COMPLETED, JOB_FAILED, TASK_FAILED
from seglake.storage import layout
from seglake.storage import s3 as s3mod
from seglake.storage.base import ChecksumMismatch
from seglake.storage.s3 import S3Store

BYTE_CALLS = {"get_object", "put_object", "upload_part", "upload_file", "upload_fileobj",
              "download_file", "download_fileobj"}


class Spy:
    """Counts the S3 calls of every S3Store client; refuses byte-carrying calls while
    armed; measures how many copies are in flight at once (each held `delay` seconds)."""

    def __init__(self, delay: float = 0.0):
        self.armed, self.delay = False, delay
        self.calls: list[tuple[str, dict]] = []
        self.refused: list[tuple[str, str]] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        self.rewrite = {}  # method name -> fn(real_method, **kw) replacing the call

    def install(self, monkeypatch):
        real_prop = S3Store.client
        monkeypatch.setattr(S3Store, "client", property(lambda store: _Proxy(self, real_prop.fget(store))))
        return self

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)


class _Proxy:
    def __init__(self, spy: Spy, real):
        self._spy, self._real = spy, real

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name.startswith("_") or not callable(attr) or name in ("get_paginator", "can_paginate"):
            return attr
        spy = self._spy

        def call(*args, **kwargs):
            with spy.lock:
                spy.calls.append((name, kwargs))
            if spy.armed and name in BYTE_CALLS:
                spy.refused.append((name, kwargs.get("Key", "")))
                raise AssertionError(f"{name} of {kwargs.get('Key')} moved object bytes through the runner")
            copying = name in ("copy_object", "upload_part_copy")
            if copying:
                with spy.lock:
                    spy.in_flight += 1
                    spy.max_in_flight = max(spy.max_in_flight, spy.in_flight)
                time.sleep(spy.delay)
            try:
                if name in spy.rewrite:
                    return spy.rewrite[name](attr, **kwargs)
                return attr(*args, **kwargs)
            finally:
                if copying:
                    with spy.lock:
                        spy.in_flight -= 1
        return call


def s3_settings(etcd_server, s3_server, root_prefix, **extra) -> Settings:
    return Settings.from_dict({
        "etcd_endpoint": etcd_server.endpoint, "etcd_root": root_prefix, "etcd_timeout": 5,
        "store_uri": f"s3://seglake-test/{root_prefix}", "s3_endpoint": s3_server.endpoint,
        "s3_access_key": s3_server.access_key, "s3_secret_key": s3_server.secret_key, **extra})


def _restore_job(meta, store, target: str, per_task: int, **seed) -> int:
    demo.seed(meta, store, demo.SeedParams(**{"partitions": 2, "segments": 12, "rows": 50, "dim": 4, **seed}))
    snapshot.create(meta, store, "demo", "s3snap")
    job_id = restore.restore(meta, store, "demo", "s3snap", target)
    copyjob.plan(meta, job_id, per_task)
    return job_id


def _source_keys(meta) -> set[str]:
    coll = meta.catalog.get_by_name("demo")
    return {f.key for s in meta.segments.list(coll.collection_id) for f in layout.segment_files(s)}


# -- item 3: server-side, many in flight, no bytes through the runner -----------------------
def test_executor_runner_copies_server_side_with_many_copies_in_flight(
        meta, etcd_server, s3_server, root_prefix, s3_store, monkeypatch):
    """The Spark executor's entry point (run_tasks_from_env), copy_threads=16: every copy
    is a CopyObject, none reads or writes object bytes, and the copies of several
    segments and tasks overlap (more in flight than any one segment has files), never
    more than copy_threads."""
    settings = s3_settings(etcd_server, s3_server, root_prefix, copy_threads=16)
    job_id = _restore_job(meta, s3_store, "s3copy", per_task=2)
    per_segment = max(len(copyjob.source_and_target_files(s))
                      for s in meta.segments.list(meta.copyjobs.get(job_id)[0].target_collection_id))
    spy = Spy(delay=0.02).install(monkeypatch)
    spy.armed = True
    out = list(copyjob.run_tasks_from_env(copyjob.pending_task_ids(meta, job_id), job_id, settings.to_env()))
    spy.armed = False
    assert spy.refused == []
    job = meta.copyjobs.get(job_id)[0]
    assert [state for _, state, _ in out] == ["Completed"] * job.total_tasks and job.total_tasks > 4
    assert spy.count("copy_object") == job.total_files and spy.count("head_object") == 0
    assert per_segment < spy.max_in_flight <= 16, (per_segment, spy.max_in_flight)
    p = copyjob.progress(meta, job_id)
    assert (p["copied_files"], p["copied_segments"], p["tasks_completed"]) == \
        (job.total_files, job.total_segments, job.total_tasks)
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED
    assert verify.verify_collection(meta, s3_store, "s3copy")["ok"]


def test_concurrent_runner_fails_a_task_on_a_missing_source_and_stops_its_copies(meta, s3_store, monkeypatch):
    """With copies in flight across tasks, a missing source still fails its task (named),
    the job fails and rolls back, and no copy of a finished task is still running."""
    job_id = _restore_job(meta, s3_store, "s3miss", per_task=3)
    victim = sorted(_source_keys(meta))[len(_source_keys(meta)) // 2]
    s3_store.delete_many([victim])
    spy = Spy(delay=0.01).install(monkeypatch)
    tasks = copyjob.run_inline(meta, s3_store, job_id, threads=8)
    assert spy.in_flight == 0  # every copy of every task had ended when the runner returned
    failed = [t for t in tasks if t.state == TASK_FAILED]
    assert len(failed) == 1 and victim in failed[0].reason
    assert copyjob.finalize(meta, job_id).state == JOB_FAILED
    assert not [c for c in meta.catalog.list() if c.name == "s3miss"]  # rolled back


# -- item 3: the multipart branch on real SeaweedFS ------------------------------------------
MiB = 1 << 20


def _upload_in_parts(store: S3Store, key: str, parts: list[bytes]) -> str:
    c, full = store.client, store._full(key)
    up = c.create_multipart_upload(Bucket=store.bucket, Key=full)
    etags = [c.upload_part(Bucket=store.bucket, Key=full, UploadId=up["UploadId"], PartNumber=i, Body=p)["ETag"]
             for i, p in enumerate(parts, 1)]
    return c.complete_multipart_upload(
        Bucket=store.bucket, Key=full, UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"ETag": e, "PartNumber": i} for i, e in enumerate(etags, 1)]})["ETag"]


def _no_uploads_left(store: S3Store) -> bool:
    return not store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=store.base).get("Uploads")


def _part_ranges(spy: Spy) -> list[str]:
    return [kw["CopySourceRange"] for n, kw in spy.calls if n == "upload_part_copy"]


def test_multipart_copy_of_a_source_uploaded_in_parts_follows_its_parts(s3_store, monkeypatch):
    """Above MAX_COPY_OBJECT (lowered to 1 MiB), a source uploaded in 3 parts is copied
    with UploadPartCopy along its own part boundaries; SeaweedFS's part answers are no
    MD5s, so the copy is checked by streaming the TARGET in ranges: the source is never
    read, nothing is uploaded, no upload is left open."""
    monkeypatch.setattr(s3mod, "MAX_COPY_OBJECT", MiB)
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(1000)]
    _upload_in_parts(s3_store, "big/src", parts)
    spy = Spy().install(monkeypatch)
    info, _ = s3_store.copy_checked("big/src", "big/dst")
    assert info.size == sum(map(len, parts))
    assert _part_ranges(spy) == ["bytes=0-5242879", "bytes=5242880-10485759", "bytes=10485760-10486759"]
    assert spy.count("copy_object") == spy.count("put_object") == spy.count("upload_part") == 0
    reads = [kw["Key"] for n, kw in spy.calls if n == "get_object"]
    assert reads and set(reads) == {s3_store._full("big/dst")}
    assert all("Range" in kw for n, kw in spy.calls if n == "get_object")
    assert s3_store.get("big/dst") == b"".join(parts)
    assert _no_uploads_left(s3_store)


def test_multipart_copy_of_a_single_part_source_over_the_limit(s3_store, monkeypatch):
    monkeypatch.setattr(s3mod, "MAX_COPY_OBJECT", MiB)
    monkeypatch.setattr(s3mod, "COPY_PART_SIZE", 5 * MiB)
    data = os.urandom(12 * MiB + 7)
    s3_store.put("big/one", data)
    spy = Spy().install(monkeypatch)
    s3_store.copy_checked("big/one", "big/one-copy")
    assert _part_ranges(spy) == ["bytes=0-5242879", "bytes=5242880-10485759", "bytes=10485760-12582918"]
    assert {kw["Key"] for n, kw in spy.calls if n == "get_object"} == {s3_store._full("big/one-copy")}
    assert s3_store.get("big/one-copy") == data
    spy.calls.clear()
    s3_store.copy("big/one", "big/one-plain")  # the unchecked copy takes the same server-side path
    assert len(_part_ranges(spy)) == 3 and spy.count("get_object") == 0
    assert s3_store.get("big/one-plain") == data


def test_multipart_copy_of_a_multipart_copy(s3_store, monkeypatch):
    """A restore of a restored collection: the source is itself a multipart copy, whose
    ETag (on SeaweedFS) is no MD5 composition of its content; the copy still checks out,
    by streaming both sides, and a wrong copy of it is still refused."""
    monkeypatch.setattr(s3mod, "MAX_COPY_OBJECT", MiB)
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(1000)]
    _upload_in_parts(s3_store, "big/src", parts)
    s3_store.copy_checked("big/src", "big/gen1")
    s3_store.copy_checked("big/gen1", "big/gen2")
    assert s3_store.get("big/gen2") == b"".join(parts)
    spy = Spy().install(monkeypatch)
    spy.rewrite["upload_part_copy"] = _shift_second_part
    with pytest.raises(ChecksumMismatch):
        s3_store.copy_checked("big/gen1", "big/gen3")
    assert not s3_store.exists("big/gen3") and _no_uploads_left(s3_store)


def _shift_second_part(real, **kw):
    """A copy that went wrong: part 2 copies the source's bytes from one byte later."""
    if kw["PartNumber"] == 2:
        lo, hi = map(int, kw["CopySourceRange"][len("bytes="):].split("-"))
        kw = {**kw, "CopySourceRange": f"bytes={lo - 1}-{hi - 1}"}
    return real(**kw)


def test_multipart_copy_with_wrong_content_is_refused_and_removed(s3_store, monkeypatch):
    monkeypatch.setattr(s3mod, "MAX_COPY_OBJECT", MiB)
    _upload_in_parts(s3_store, "big/src", [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(10)])
    spy = Spy().install(monkeypatch)
    spy.rewrite["upload_part_copy"] = _shift_second_part
    with pytest.raises(ChecksumMismatch):
        s3_store.copy_checked("big/src", "big/dst")
    assert not s3_store.exists("big/dst")
    assert _no_uploads_left(s3_store)


def test_restore_through_the_multipart_branch(meta, s3_store, monkeypatch):
    """A whole restore with every file above MAX_COPY_OBJECT (lowered to 64 bytes): each
    file is one UploadPartCopy, no source byte is read, nothing is uploaded, verify ok."""
    monkeypatch.setattr(s3mod, "MAX_COPY_OBJECT", 64)
    job_id = _restore_job(meta, s3_store, "s3multi", per_task=4, segments=4)
    sources = {s3_store._full(k) for k in _source_keys(meta)}
    spy = Spy().install(monkeypatch)
    copyjob.run_inline(meta, s3_store, job_id, threads=8)
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED
    big = meta.copyjobs.get(job_id)[0].total_files
    assert spy.count("upload_part_copy") == spy.count("complete_multipart_upload") > 0
    assert spy.count("upload_part_copy") + spy.count("copy_object") == big
    assert not sources & {kw["Key"] for n, kw in spy.calls if n == "get_object"}
    assert spy.count("put_object") == spy.count("upload_part") == 0
    monkeypatch.undo()
    assert verify.verify_collection(meta, s3_store, "s3multi")["ok"]
    assert _no_uploads_left(s3_store)


# -- item 3 on AWS's own answers (moto): the part ETags prove the copy, no byte is read ------
@pytest.fixture
def aws_store(monkeypatch):
    moto = pytest.importorskip("moto")
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(k, "testing")
    with moto.mock_aws():
        store = S3Store("s3://seglake-aws/base")
        store.ensure_bucket()
        yield store


def test_aws_multipart_copy_is_proven_by_part_etags_without_reading(aws_store, monkeypatch):
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(1000)]
    etag = _upload_in_parts(aws_store, "big/src", parts).strip('"')
    spy = Spy().install(monkeypatch)
    spy.armed = True
    aws_store.copy_checked("big/src", "big/dst")
    spy.armed = False
    assert spy.refused == [] and spy.count("get_object") == 0
    assert len(_part_ranges(spy)) == 3
    assert s3mod.composite_etag([hashlib.md5(p).hexdigest() for p in parts]) == etag
    assert aws_store.get("big/dst") == b"".join(parts)


def test_aws_multipart_copy_with_wrong_parts_is_aborted_before_it_exists(aws_store, monkeypatch):
    _upload_in_parts(aws_store, "big/src", [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(10)])
    spy = Spy().install(monkeypatch)
    spy.rewrite["upload_part_copy"] = _shift_second_part
    with pytest.raises(ChecksumMismatch, match="parts compose"):
        aws_store.copy_checked("big/src", "big/dst")
    assert spy.count("complete_multipart_upload") == 0 and spy.count("abort_multipart_upload") == 1
    assert not aws_store.exists("big/dst")
    assert _no_uploads_left(aws_store)


def test_aws_multipart_copy_failing_part_aborts_the_upload(aws_store, monkeypatch):
    from botocore.exceptions import ClientError

    from seglake.errors import SeglakeError

    _upload_in_parts(aws_store, "big/src", [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(10)])
    spy = Spy().install(monkeypatch)
    calls = collections.Counter()

    def flaky(real, **kw):
        calls["n"] += 1
        if kw["PartNumber"] == 3:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, "UploadPartCopy")
        return real(**kw)
    spy.rewrite["upload_part_copy"] = flaky
    from seglake.storage import s3 as s3mod
    monkeypatch.setattr(s3mod, "RETRY_BASE", 0.001)  # the same tries (part 3 fails every one), no waits
    monkeypatch.setattr(s3mod, "RETRY_CAP", 0.002)
    with pytest.raises(SeglakeError, match="InternalError"):
        aws_store.copy_checked("big/src", "big/dst")
    assert not aws_store.exists("big/dst") and _no_uploads_left(aws_store)


# -- one request per object: the sources are listed, not HEADed -----------------------------
class Requests:
    """Counts the HTTP requests a boto3 client sends, by operation (botocore's
    before-send event: one per request actually sent, retries included)."""

    def __init__(self, client):
        self.ops: collections.Counter = collections.Counter()
        self.listed = 0  # keys the ListObjectsV2 answers carried
        client.meta.events.register("before-send.s3", self._count)
        client.meta.events.register("after-call.s3.ListObjectsV2", self._listed)

    def _count(self, event_name: str, **_):
        self.ops[event_name.rsplit(".", 1)[-1]] += 1

    def _listed(self, parsed, **_):
        self.listed += len(parsed.get("Contents", []))


def _task_sources(meta, job_id) -> list[list[str]]:
    """Each task's source keys, in plan order."""
    job = meta.copyjobs.get(job_id)[0]
    targets = {s.segment_id: s for s in meta.segments.list(job.target_collection_id)}
    return [[src for m in t.mappings for src, _, _ in copyjob.source_and_target_files(targets[m.target_segment])]
            for t in meta.copyjobs.tasks(job_id)]


def test_a_first_attempt_costs_one_request_per_small_object(meta, s3_store):
    """A restore's first attempt sends one CopyObject per file and no HeadObject: the
    sizes and ETags come from a listing of each task's sources, a page per kind of file
    (insert/delta/stats logs, index files) and task, and one more per gap where other
    segments sort between the task's own (the demo's ids have 1 to 3 digits, so '4' sorts
    after '232'). Nothing reads or writes object bytes."""
    job_id = _restore_job(meta, s3_store, "s3one", per_task=4, segments=8)
    job = meta.copyjobs.get(job_id)[0]
    requests = Requests(s3_store.client)
    tasks = copyjob.run_inline(meta, s3_store, job_id, threads=8)
    assert [t.state for t in tasks] == ["Completed"] * job.total_tasks and job.total_tasks == 4
    kinds = sum(len({k.split("/", 1)[0] for k in keys}) for keys in _task_sources(meta, job_id))
    ops = dict(requests.ops)
    assert ops.pop("CopyObject") == job.total_files
    lists = ops.pop("ListObjectsV2")
    assert kinds == 4 * job.total_tasks and kinds <= lists <= kinds + job.total_segments  # (measured: 18)
    assert lists * 4 < job.total_files  # 144 files
    assert ops == {}, ops  # no HeadObject, no GetObject/PutObject, nothing else
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED
    assert verify.verify_collection(meta, s3_store, "s3one")["ok"]


@pytest.mark.parametrize("server", ["honours", "ignores", "deleted"])
def test_a_source_changed_between_its_listing_and_its_copy_fails_the_task(
        meta, etcd_server, s3_server, root_prefix, s3_store, server):
    """The source is rewritten (same size, other bytes) right before its CopyObject is
    sent. SeaweedFS honours CopySourceIfMatch (412: nothing is copied); for a server that
    ignores it ('ignores': the condition is stripped from the request) the answer's ETag
    differs from the listed one and the copy is deleted. ('deleted': the source is removed
    instead.) Either way the task fails naming the source, the job fails and rolls back,
    and no object is left at the target key."""
    job_id = _restore_job(meta, s3_store, "s3changed", per_task=100, segments=2)
    job = meta.copyjobs.get(job_id)[0]
    targets = meta.segments.list(job.target_collection_id)
    src, dst, size = sorted(f for s in targets for f in copyjob.source_and_target_files(s))[3]
    other = S3Store(s3_store.uri, **s3_store._client_args)
    full, rewritten = s3_store._full(src), []

    def rewrite_source(params, **_):
        if params.get("Key") == s3_store._full(dst) and not rewritten:
            if server == "deleted":
                other.client.delete_object(Bucket=s3_store.bucket, Key=full)
            else:
                other.client.put_object(Bucket=s3_store.bucket, Key=full, Body=os.urandom(size))
            rewritten.append(src)
        if server == "ignores":
            params.pop("CopySourceIfMatch", None)
    s3_store.client.meta.events.register("before-parameter-build.s3.CopyObject", rewrite_source)
    (task,) = copyjob.run_inline(meta, s3_store, job_id, threads=4)
    assert rewritten == [src]
    assert task.state == TASK_FAILED and src in task.reason, task.reason
    assert ("missing" if server == "deleted" else "ETag") in task.reason
    assert not s3_store.exists(dst)
    assert copyjob.finalize(meta, job_id).state == JOB_FAILED
    assert not [c for c in meta.catalog.list() if c.name == "s3changed"]


def test_resume_after_a_kill_keeps_good_targets_and_replaces_bad_ones_by_listing(
        meta, etcd_server, s3_server, root_prefix, s3_store):
    """A runner SIGKILLed mid-copy; then one copied target is rewritten with other bytes
    of the same size, one cut short, and a stray object left in a target directory. The
    resumed attempt keeps every good target without a request of its own (the listing of
    the target directories carries their ETags), copies only the bad and missing ones,
    removes the stray object, sends no HeadObject, and the restore verifies."""
    import signal
    import subprocess
    import sys

    settings = s3_settings(etcd_server, s3_server, root_prefix)
    job_id = _restore_job(meta, s3_store, "s3killed", per_task=100, segments=4)
    job = meta.copyjobs.get(job_id)[0]
    env = {**os.environ, **settings.to_env(), "SEGLAKE_FAULTS": f"copy.after_file:kill@{job.total_files // 2}"}
    code = ("from seglake.config import Settings; from seglake.meta import Meta; "
            "from seglake.storage import open_store; from seglake.lifecycle import copyjob; "
            f"s = Settings.load(); copyjob.run_inline(Meta.from_settings(s), open_store(s), {job_id})")
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == -signal.SIGKILL
    files = sorted(f for s in meta.segments.list(job.target_collection_id)
                   for f in copyjob.source_and_target_files(s))
    copied = [f for f in files if s3_store.exists(f[1])]
    assert len(copied) == job.total_files // 2
    (_, swapped, size_a), (_, short, _) = copied[0], copied[-1]
    s3_store.put(swapped, os.urandom(size_a))
    s3_store.put(short, b"cut")
    stray = swapped.rpartition("/")[0] + "/999999"
    s3_store.put(stray, b"left by a killed copy")
    requests = Requests(s3_store.client)
    (task,) = copyjob.run_inline(meta, s3_store, job_id, threads=4)
    assert task.state == "Completed" and task.attempt == 2
    good = len(copied) - 2
    assert (task.skipped_files, task.copied_files) == (good, job.total_files - good)
    assert requests.ops["CopyObject"] == job.total_files - good
    assert requests.ops["HeadObject"] == 0 and requests.ops["GetObject"] == 0
    assert not s3_store.exists(stray)
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED
    for src, dst, _ in files:
        assert s3_store.get(dst) == s3_store.get(src)
    assert verify.verify_collection(meta, s3_store, "s3killed")["ok"]


def test_describe_answers_from_listings_and_never_wrongly(s3_store):
    """Store.describe on real SeaweedFS (which lists in directory order, not byte order):
    wanted keys spread over groups, with unwanted keys between them and a wanted key that
    does not exist. Every answer is the object as it is (size, ETag = MD5 of its bytes);
    keys laid out as seglake lays them out (digit directories) are all found; clustered
    keys cost a page per group, and the pages read at most twice the keys wanted (index
    builds alternate wanted and unwanted files: each page asks for exactly the keys still
    wanted, so the pages halve)."""
    data = {}
    for seg in range(100, 130):
        for f in range(3):
            data[f"insert_log/7/1/{seg}/{f}"] = os.urandom(10 + seg + f)
        data[f"delta_log/7/1/{seg}/1"] = os.urandom(5)
    for build in range(500, 540):
        data[f"index_files/{build}/1/1/{build - 400}/meta"] = os.urandom(7)
        data[f"index_files/{build}/1/2/{build}/meta"] = os.urandom(8)   # another segment's: unwanted
    odd = {"odd/a-x": b"1", "odd/a/c": b"22", "odd/a.b": b"333", "odd/a/b/1": b"4444"}
    for k, v in {**data, **odd}.items():
        s3_store.put(k, v)
    wanted = [k for k in data if not k.startswith("index_files/") or "/1/1/" in k]
    wanted = [k for k in wanted if "/11" not in k]  # segments 110-119 left out: a gap of unwanted keys
    wanted += ["insert_log/7/1/105/9"]              # does not exist
    requests = Requests(s3_store.client)
    got = s3_store.describe(wanted + list(odd))
    present = [k for k in wanted if k in data]
    assert set(present) <= set(got) <= set(present) | set(odd)
    for k, v in got.items():
        body = data.get(k, odd.get(k))
        assert (v.key, v.size, v.md5, v.etag) == (k, len(body), hashlib.md5(body).hexdigest(),
                                                  hashlib.md5(body).hexdigest())
    assert requests.ops["ListObjectsV2"] <= 10, requests.ops  # 4 groups, the gap, the alternation (measured: 8)
    assert requests.listed <= 2 * len(wanted + list(odd)), requests.listed
    assert set(requests.ops) == {"ListObjectsV2"}


def test_aws_describe_and_conditional_copy(aws_store):
    """On AWS's semantics (moto: byte-ordered listings), describe finds every key, names
    that sort around '/' included; copy_listed of a source rewritten since it was listed
    copies nothing and raises ChecksumMismatch; of an unchanged one, sends one request."""
    bodies = {"odd/a-x": b"1", "odd/a/c": b"22", "odd/a.b": b"333", "odd/a/b/1": b"4444", "odd/b": b"55555"}
    for k, v in bodies.items():
        aws_store.put(k, v)
    got = aws_store.describe([*bodies, "odd/zz"])
    assert {k: (v.size, v.md5) for k, v in got.items()} == \
        {k: (len(v), hashlib.md5(v).hexdigest()) for k, v in bodies.items()}
    requests = Requests(aws_store.client)
    info, digest = aws_store.copy_listed(got["odd/b"], "copy/b")
    assert (info.size, digest, dict(requests.ops)) == (5, f"md5:{got['odd/b'].md5}", {"CopyObject": 1})
    aws_store.put("odd/a/c", b"XX")  # same size, other bytes
    with pytest.raises(ChecksumMismatch, match="changed after it was listed|ETag"):
        aws_store.copy_listed(got["odd/a/c"], "copy/c")
    assert not aws_store.exists("copy/c")


def test_describe_of_scattered_keys_reads_a_bounded_number_of_keys(s3_store):
    """Wanted keys each followed by 30 unwanted ones: the pages shrink to the density
    they meet, so they carry at most ~3x the keys wanted and take at most a page each
    (not a page of every unwanted key; not the whole prefix)."""
    from concurrent.futures import ThreadPoolExecutor

    keys = [f"insert_log/9/1/{seg}/100/{n}" for seg in range(1000, 1012) for n in range(31)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: s3_store.client.put_object(Bucket=s3_store.bucket, Key=s3_store._full(k),
                                                           Body=k.encode()), keys))
    wanted = keys[::31]  # the first file of each segment
    requests = Requests(s3_store.client)
    got = s3_store.describe(wanted)
    assert sorted(got) == sorted(wanted) and all(got[k].size == len(k) for k in wanted)
    assert requests.ops["ListObjectsV2"] <= len(wanted), requests.ops
    assert requests.listed <= 3 * len(wanted), requests.listed  # (measured: 12 pages, 34 keys)


def test_the_store_client_parses_listing_timestamps_fast_and_alone(s3_store):
    """S3's XML timestamps (one per listed key) are parsed by fromisoformat in the
    store's client, and so are HTTP-date headers (every GET's and HEAD's Last-Modified),
    to the same instants botocore's parser gives; other clients in the process keep
    botocore's parser."""
    import boto3
    from botocore.utils import parse_timestamp

    for v in ("2026-11-22T12:08:31.640Z", "2026-11-22T12:08:31Z", "Sun, 22 Nov 2026 12:08:31 GMT",
              "Sun, 22 Nov 2026 12:08:31 +0000", "Xyz, 22 Nov 2026 12:08:31 GMT", "Sun, 99 Nov 2026 12:08:31 GMT",
              "nonsense"):
        try:
            want = parse_timestamp(v)
        except ValueError:
            with pytest.raises(ValueError):
                s3mod._timestamp(v)
            continue
        got = s3mod._timestamp(v)
        assert got == want and got.utcoffset() == want.utcoffset()
    s3_store.put("ts/a", b"x")
    (listed,) = s3_store.list_described("ts/")
    assert abs(listed.mtime - s3_store.head("ts/a").mtime) < 1.0  # HEAD: second precision
    assert s3_store.client._endpoint._response_parser_factory is not \
        boto3.client("s3", region_name="us-east-1")._endpoint._response_parser_factory


def test_plan_cuts_tasks_in_the_order_the_sources_list(meta, s3_store):
    """With ids of different widths (the demo's run from 1 to 3 digits) numeric order is
    not listing order ('4' lists after '232'); plan takes the segments in listing order,
    so each task's source directories are one run of that order."""
    job_id = _restore_job(meta, s3_store, "s3order", per_task=3, segments=10)
    order = [(str(m.source_partition), str(m.source_segment))
             for t in meta.copyjobs.tasks(job_id) for m in t.mappings]
    numeric = sorted(order, key=lambda ps: (int(ps[0]), int(ps[1])))
    assert order == sorted(order) != numeric  # the demo's ids do sort differently as strings


def test_copy_listed_of_a_source_uploaded_in_parts_keeps_the_multipart_path(s3_store, monkeypatch):
    """A listed source whose ETag is a multipart one (no MD5 of the content) is not
    copied by one CopyObject: it takes copy_checked's multipart path (its own part
    boundaries, the copy checked), so the listing never weakens the check. (Below
    MAX_COPY_OBJECT: the ETag alone routes it.)"""
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(1000)]
    _upload_in_parts(s3_store, "big/src", parts)
    listed = s3_store.describe(["big/src"])["big/src"]
    assert listed.md5 == "" and listed.etag.endswith("-3")
    spy = Spy().install(monkeypatch)
    s3_store.copy_listed(listed, "big/dst")
    assert len(_part_ranges(spy)) == 3 and spy.count("copy_object") == 0
    assert s3_store.get("big/dst") == b"".join(parts)
