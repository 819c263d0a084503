"""S3 listing under injected faults (moto: AWS's own answers, with one page broken):
every listing GC uses (the plain one, the delimiter level, the name-range units of the
Spark mark) fails instead of passing a partial view for complete, and lists each key
once even when the server repeats a name across pages."""

from datetime import UTC, datetime

import pytest

moto = pytest.importorskip("moto")

from seglake.errors import SeglakeError
from seglake.lifecycle.gc import listing as gclisting
from seglake.storage.s3 import S3Store

N = 1_100  # > 1 page of 1000, of objects and of common prefixes


@pytest.fixture(scope="module")
def bucket():
    import boto3

    with moto.mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="gc-faults")
        for i in range(N):
            client.put_object(Bucket="gc-faults", Key=f"root/insert_log/1/2/{i}/100/1", Body=b"x")
            client.put_object(Bucket="gc-faults", Key=f"root/insert_log/{i}/x", Body=b"x")
        yield


@pytest.fixture
def s3(bucket):
    """A store over the module's bucket with a client of its own (its own event hooks)."""
    import boto3

    client = boto3.client("s3", region_name="us-east-1")
    return S3Store("s3://gc-faults/root", client=client), client


def _on_page(client, n: int, fn):
    """Call fn(parsed) on the n-th ListObjectsV2 answer (1-based) of this client."""
    seen = {"calls": 0}

    def hook(parsed, **_):
        seen["calls"] += 1
        if seen["calls"] == n:
            fn(parsed)

    client.meta.events.register("after-call.s3.ListObjectsV2", hook)
    return seen


def _listings(store):
    """Every listing the mark makes (inline and Spark units), each run to its end."""
    return {
        "list": lambda: list(store.list("insert_log/")),
        "list_level": lambda: store.list_level("insert_log/"),
        "list_names": lambda: list(store.list_names("insert_log/1/2/", "")),
        "split_units": lambda: list(gclisting.split_units(store, "insert_log/", 4, 1)),
    }


@pytest.fixture
def quick_retries(monkeypatch):
    """The store's retry policy, its waits cut to ~nothing (the tries are the same)."""
    from seglake.storage import s3 as s3mod
    monkeypatch.setattr(s3mod, "RETRY_BASE", 0.001, raising=False)
    monkeypatch.setattr(s3mod, "RETRY_CAP", 0.002, raising=False)
    return s3mod


def _fail_page(client, fail_on):
    """An InternalError (a 500, as SeaweedFS answers right after a restart) instead of
    the ListObjectsV2 calls whose number (1-based) is in `fail_on`."""
    seen = {"calls": 0}

    def boom(**_):
        from botocore.exceptions import ClientError
        seen["calls"] += 1
        if fail_on(seen["calls"]):
            raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"},
                               "ResponseMetadata": {"HTTPStatusCode": 500}}, "ListObjectsV2")

    client.meta.events.register("before-call.s3.ListObjectsV2", boom)
    return seen


@pytest.mark.parametrize("which", ["list", "list_level", "list_names", "split_units"])
def test_a_page_that_fails_once_mid_listing_is_asked_again(s3, which, quick_retries):
    """The second page fails once: that page (its own continuation token) is asked
    again, and the listing is the complete one, each name once (was: the whole listing
    failed on the first 500 botocore's quota left unretried)."""
    store, client = s3
    whole = _listings(store)[which]()
    seen = _fail_page(client, lambda n: n == 2)
    assert _listings(store)[which]() == whole
    assert seen["calls"] >= 3


@pytest.mark.parametrize("which", ["list", "list_level", "list_names", "split_units"])
def test_a_page_that_keeps_failing_fails_the_listing(s3, which, quick_retries):
    """Fail-closed: a page that fails on every try fails the listing after
    RETRY_ATTEMPTS tries of that page; nothing passes a partial view for complete."""
    store, client = s3
    seen = _fail_page(client, lambda n: n >= 2)
    with pytest.raises(SeglakeError, match="InternalError"):
        _listings(store)[which]()
    assert seen["calls"] >= 1 + quick_retries.RETRY_ATTEMPTS


@pytest.mark.parametrize("which", ["list", "list_level", "list_names", "split_units"])
def test_a_page_that_says_more_follow_without_a_token_fails_the_listing(s3, which):
    store, client = s3
    whole = _listings(store)[which]()                 # the complete answer first
    _on_page(client, 1, lambda parsed: parsed.pop("NextContinuationToken", None))
    assert whole
    with pytest.raises(SeglakeError, match="listing is incomplete"):  # (was: a quietly shorter answer)
        _listings(store)[which]()


def test_a_name_repeated_across_pages_is_listed_once(s3):
    store, client = s3
    dirs, _ = store.list_level("insert_log/")
    assert len(dirs) == N

    def repeat(parsed):
        parsed["CommonPrefixes"] = parsed.get("CommonPrefixes", []) + [{"Prefix": "root/insert_log/7/"}]

    _on_page(client, 2, repeat)
    again, _ = store.list_level("insert_log/")
    assert sorted(again) == sorted(dirs)


@pytest.mark.parametrize("which", ["list", "list_level", "list_names", "split_units"])
def test_a_page_naming_a_key_outside_the_prefix_fails_the_listing(s3, which):
    """'root_insert_log/...' cut to the store's key space would read 'insert_log/...':
    another object's name, judged with this one's size and age."""
    store, client = s3

    def stray(parsed):
        parsed["Contents"] = parsed.get("Contents", []) + [
            {"Key": "root_insert_log/1/2/3/100/1", "Size": 1, "LastModified": datetime.now(UTC)}]

    _on_page(client, 1, stray)
    with pytest.raises(SeglakeError, match="outside the prefix"):
        _listings(store)[which]()
