"""Exactly-once guarded writes when etcd answers UNAVAILABLE after applying a write
(issue 8 item 8), against a real etcd with faults injected at the client level."""

import grpc
import pytest

from seglake.errors import Conflict, Unavailable
from seglake.meta.alloc import IdAllocator
from seglake.meta.kv import KV, Put, absent, exists, retry_on_conflict, unchanged

pytestmark = pytest.mark.etcd


class _RpcError(grpc.RpcError):
    """What grpc raises for etcd's "request timed out" / "leader changed"."""

    def __init__(self, code=grpc.StatusCode.UNAVAILABLE):
        self._code = code
        self._details = "etcdserver: request timed out" if code == grpc.StatusCode.UNAVAILABLE else "Deadline Exceeded"

    def code(self):
        return self._code

    def details(self):
        return self._details


class _Stub:
    def __init__(self, real, plan):
        self._real, self._plan = real, plan

    def Txn(self, request, *args, **kwargs):
        """Plan actions: ("apply", then, code): the write lands, `then()` runs (a racing
        writer), the answer is lost as `code`; ("lose", then): the request never lands."""
        if not self._plan:
            return self._real.Txn(request, *args, **kwargs)
        kind, then, code = self._plan.pop(0)
        if kind == "apply":
            self._real.Txn(request, *args, **kwargs)
        then()
        raise _RpcError(code)

    def __getattr__(self, name):
        return getattr(self._real, name)


def applied(then=lambda: None, code=grpc.StatusCode.UNAVAILABLE):
    return ("apply", then, code)


def lost(then):
    return ("lose", then, grpc.StatusCode.UNAVAILABLE)


class _FaultyClient:
    """Wraps the etcd3 client: its kvstub applies the `plan`, one action per Txn call."""

    def __init__(self, real, plan):
        self._real, self.plan = real, plan

    @property
    def kvstub(self):
        return _Stub(self._real.kvstub, self.plan)

    def __getattr__(self, name):
        return getattr(self._real, name)


@pytest.fixture
def faulty(settings):
    kv = KV.from_settings(settings)
    other = KV.from_settings(settings)  # a second, healthy client: the racing writer
    real = kv._client
    plan: list = []
    kv._client = _FaultyClient(real, plan)
    yield kv, other, plan
    kv._client = real
    kv.close()
    other.close()


def test_a_create_applied_but_answered_unavailable_is_reported_done(faulty, root_prefix):
    kv, other, plan = faulty
    key = f"{root_prefix}/names/c1"
    plan.append(applied())
    rev = kv.txn([absent(key)], [Put(key, "1")], reason="taken")  # old code: Conflict "taken"
    got = other.get(key)
    assert got.value == b"1" and rev == got.mod_revision and got.version == 1
    assert plan == []  # the retry really happened


def test_a_cas_applied_but_answered_unavailable_is_reported_done(faulty, root_prefix):
    kv, other, plan = faulty
    key = f"{root_prefix}/job"
    other.put(key, "Pending")
    read = kv.get(key)
    plan.append(applied())
    kv.txn([unchanged(read)], [Put(key, "Executing")])
    assert other.get(key).value == b"Executing"


def test_a_deadline_after_applying_is_retried_and_reported_done(faulty, root_prefix):
    kv, other, plan = faulty
    key = f"{root_prefix}/dl"
    plan.append(applied(code=grpc.StatusCode.DEADLINE_EXCEEDED))
    kv.txn([absent(key)], [Put(key, "x")])  # old code: Unavailable without a retry
    assert other.get(key).version == 1


def test_a_retry_never_applies_twice_over_a_later_writer(faulty, root_prefix):
    """The guard stays true after the first apply (exists(parent)): without the marker,
    the retry would overwrite what another writer did in between."""
    kv, other, plan = faulty
    parent, child = f"{root_prefix}/parent", f"{root_prefix}/child"
    other.put(parent, "p")

    plan.append(applied(then=lambda: other.put(child, "later")))  # another writer, after ours landed
    kv.txn([exists(parent)], [Put(child, "mine")])
    got = other.get(child)
    assert got.value == b"later" and got.version == 2


def test_a_genuinely_lost_race_is_still_a_conflict(faulty, root_prefix):
    kv, other, plan = faulty
    key = f"{root_prefix}/names/c2"
    plan.append(lost(lambda: other.put(key, "theirs")))  # they win; our attempt never landed
    with pytest.raises(Conflict, match="taken"):
        kv.txn([absent(key)], [Put(key, "mine")], reason="taken")
    assert other.get(key).value == b"theirs"


def test_a_lost_cas_after_unavailable_is_a_conflict_and_the_winner_stays(faulty, root_prefix):
    kv, other, plan = faulty
    key = f"{root_prefix}/state"
    other.put(key, "Pending")
    read = kv.get(key)
    plan.append(lost(lambda: other.txn([unchanged(read)], [Put(key, "Failed")])))
    with pytest.raises(Conflict):
        kv.txn([unchanged(read)], [Put(key, "Executing")])
    assert other.get(key).value == b"Failed"


def test_retry_on_conflict_does_not_rerun_a_landed_attempt(faulty, root_prefix):
    kv, other, plan = faulty
    key = f"{root_prefix}/pins"
    other.put(key, "0")
    runs = []

    def attempt():
        read = kv.get(key)
        runs.append(read.value)
        if read.value != b"0":
            raise AssertionError("saw its own write as someone else's")
        kv.txn([unchanged(read)], [Put(key, "1")])
        return "pinned"

    plan.append(applied())
    assert retry_on_conflict(attempt, "pin") == "pinned"
    assert runs == [b"0"] and other.get(key).value == b"1"


def test_id_allocator_block_applied_but_unavailable_is_not_skipped(faulty, root_prefix):
    kv, other, plan = faulty
    key = f"{root_prefix}/alloc/id"
    ids = IdAllocator(kv, key, block_size=100)
    plan.append(applied())
    assert ids.allocate() == 1
    assert int(other.get(key).value) == 101  # one block reserved, not two


def test_guarded_writes_leave_leased_markers_under_the_root(faulty, root_prefix):
    kv, other, plan = faulty
    kv.txn([absent(f"{root_prefix}/m")], [Put(f"{root_prefix}/m", "x")])
    markers = list(other.range(f"{root_prefix}/txn/"))
    assert len(markers) == 1
    resp = other._client.get_response(markers[0].key)
    lease = resp.kvs[0].lease
    assert lease and 0 < other.lease_ttl(lease) <= 600
    kv.put(f"{root_prefix}/blind", "y")  # unguarded: no marker
    assert other.count(f"{root_prefix}/txn/") == 1


def test_a_revoked_marker_lease_is_replaced(faulty, root_prefix):
    kv, other, plan = faulty
    kv.txn([absent(f"{root_prefix}/a")], [Put(f"{root_prefix}/a", "x")])
    other.revoke_lease(kv._marker_lease[0])
    kv.txn([absent(f"{root_prefix}/b")], [Put(f"{root_prefix}/b", "x")])
    assert other.get(f"{root_prefix}/b").value == b"x"


def test_unavailable_on_every_attempt_reports_unavailable_not_conflict(faulty, root_prefix):
    kv, other, plan = faulty
    key = f"{root_prefix}/never"
    plan.extend([applied()] * (kv.retries + 1))
    with pytest.raises(Unavailable, match="may or may not have been applied"):
        kv.txn([absent(key)], [Put(key, "x")])
    assert other.get(key).version == 1  # applied once, however many attempts
