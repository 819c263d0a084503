"""S3 requests across a transient failure (moto: AWS's own answers, one request broken):
a 5xx / InternalError / SlowDown answer or a refused connection is retried with a bounded
backoff by every call of the store (the sweep's HEADs and deletes, reads, writes,
copies), a 4xx is not, and a failure that outlasts the tries is a typed error. (A GC
sweep child once failed on the InternalError SeaweedFS answered right after a restart.)
The listings' side (fail-closed: a page retried, never skipped) is in
test_s3_listing_faults.py."""

import pytest

moto = pytest.importorskip("moto")

from botocore.exceptions import ClientError, EndpointConnectionError

from seglake.errors import SeglakeError, Unavailable
from seglake.storage import s3 as s3mod
from seglake.storage.base import ObjectInfo
from seglake.storage.s3 import S3Store


@pytest.fixture
def s3(monkeypatch):
    import boto3

    monkeypatch.setattr(s3mod, "RETRY_BASE", 0.001, raising=False)  # the same tries, no waits
    monkeypatch.setattr(s3mod, "RETRY_CAP", 0.002, raising=False)
    with moto.mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="retries")
        yield S3Store("s3://retries/root", client=client), client


def _error(code: str, status: int, op: str):
    return ClientError({"Error": {"Code": code, "Message": "injected"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, op)


def _fail(client, op: str, times: int, make):
    """The first `times` calls of `op` raise make(); the count of calls is returned."""
    seen = {"calls": 0}

    def hook(**_):
        seen["calls"] += 1
        if seen["calls"] <= times:
            raise make()

    client.meta.events.register(f"before-call.s3.{op}", hook)
    return seen


TRANSIENT = {
    "InternalError": lambda op: _error("InternalError", 500, op),
    "SlowDown": lambda op: _error("SlowDown", 503, op),
    "ServiceUnavailable": lambda op: _error("ServiceUnavailable", 503, op),
    "a 502 without a code": lambda op: _error("", 502, op),
    "connection refused": lambda op: EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
}


@pytest.mark.parametrize("kind", TRANSIENT)
def test_every_call_is_retried_across_a_transient_failure(s3, kind):
    store, client = s3
    store.put("a/1", b"one")
    store.put("a/2", b"two")
    calls = {
        "HeadObject": lambda: store.head("a/1").size == 3,
        "GetObject": lambda: store.get("a/1") == b"one",
        "PutObject": lambda: store.put("a/3", b"three").size == 5,
        "CopyObject": lambda: store.copy_checked("a/1", "b/1")[0].size == 3 and store.get("b/1") == b"one",
        "DeleteObjects": lambda: store.delete_checked(["a/2"]).deleted == ["a/2"] and not store.exists("a/2"),
    }
    for op, call in calls.items():
        seen = _fail(client, op, 2, lambda: TRANSIENT[kind](op))
        assert call(), op
        assert seen["calls"] == 3, (op, seen)


def test_a_sweep_delete_of_listed_objects_survives_a_restart(s3):
    """delete_checked as the GC sweep calls it (ObjectInfo: HEAD, then DeleteObjects),
    the server answering 500 to the first tries of both."""
    store, client = s3
    infos = [store.put(f"insert_log/1/2/3/100/{i}", b"orphan") for i in range(5)]
    heads = _fail(client, "HeadObject", 3, lambda: _error("InternalError", 500, "HeadObject"))
    deletes = _fail(client, "DeleteObjects", 1, lambda: _error("InternalError", 500, "DeleteObjects"))
    out = store.delete_checked([ObjectInfo(i.key, i.size, i.mtime) for i in infos])
    assert sorted(out.deleted) == sorted(i.key for i in infos) and not out.errors and not out.changed
    assert heads["calls"] == 5 + 3 and deletes["calls"] == 2
    assert not any(store.exists(i.key) for i in infos)


def test_keys_a_delete_answer_reports_as_internal_errors_are_asked_again(s3, monkeypatch):
    """DeleteObjects answers 200 with per-key InternalErrors (botocore retries none of
    them): those keys, and only those, are asked again, and deleted."""
    store, client = s3
    keys = [f"insert_log/1/2/3/100/{i}" for i in range(4)]
    for k in keys:
        store.put(k, b"x")
    real, asked = client.delete_objects, []

    def delete_objects(**kw):
        objects = kw["Delete"]["Objects"]
        asked.append([o["Key"] for o in objects])
        if len(asked) == 1:  # an answer as a server mid-restart gives it: two keys not deleted
            real(**{**kw, "Delete": {**kw["Delete"], "Objects": objects[2:]}})
            return {"Errors": [{"Key": o["Key"], "Code": "InternalError", "Message": "injected"}
                               for o in objects[:2]]}
        return real(**kw)

    monkeypatch.setattr(client, "delete_objects", delete_objects)
    out = store.delete_checked(keys)
    assert sorted(out.deleted) == keys and not out.errors
    assert asked == [["root/" + k for k in keys], ["root/" + k for k in keys[:2]]]
    assert not any(store.exists(k) for k in keys)


def test_a_failure_that_outlasts_the_tries_is_unavailable(s3):
    store, client = s3
    store.put("a/1", b"one")
    seen = _fail(client, "GetObject", 10**6, lambda: _error("InternalError", 500, "GetObject"))
    with pytest.raises(Unavailable, match="InternalError"):
        store.get("a/1")
    assert seen["calls"] == s3mod.RETRY_ATTEMPTS


def test_a_4xx_is_not_retried(s3):
    store, client = s3
    store.put("a/1", b"one")
    seen = _fail(client, "GetObject", 10**6, lambda: _error("AccessDenied", 403, "GetObject"))
    with pytest.raises(SeglakeError, match="AccessDenied") as e:
        store.get("a/1")
    assert not isinstance(e.value, Unavailable) and seen["calls"] == 1


def test_the_backoff_is_bounded():
    waits = [s3mod.backoff(a) for a in range(1, s3mod.RETRY_ATTEMPTS)]
    assert all(0 < w <= s3mod.RETRY_CAP for w in waits)
    assert sum(waits) <= s3mod.RETRY_CAP * s3mod.RETRY_ATTEMPTS
