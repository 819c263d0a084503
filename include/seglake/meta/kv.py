"""The etcd layer: compare-guarded transactions, automatic chunking, paged consistent
range reads, leases, typed errors and bounded retries.

One file on purpose (~560 lines): the etcd client; transactions, chunked writes, paged
ranges, leases and retries share one connection and one error mapping.

Guarantees
- `txn(compares, ops)`: ONE transaction; raises Conflict when a compare fails.
- `write(ops, guard)`: any number of ops, split into transactions of at most
  MAX_TXN_OPS ops and MAX_TXN_BYTES bytes, applied IN ORDER, each chunk carrying the
  same guard. Callers order children before the parent that makes them visible, so the
  store is valid at every chunk boundary; a failed guard stops at that chunk (Conflict).
- `range(prefix)`: pages of `page_size` keys, all read at the revision of the first
  page (one consistent view), so nothing assumes a prefix fits in one gRPC message.
- Guarded transactions (any compare) are exactly-once across retries: each carries a
  write id, a marker key `{root}/txn/{write_id}` put in the same transaction (on a
  lease, so markers expire) and guarded by "marker absent". etcd answers UNAVAILABLE
  ("request timed out", "leader changed") or the client times out AFTER a write may
  have been applied; the retry then cannot apply twice (its own marker fails the
  compare) and the failure branch reads the marker back in the same transaction, so a
  write that did land is reported as done (its revision), never as Conflict.
- `changes(lo, hi, since, fence)`: what changed in [lo, hi) from revision `since` on,
  read from etcd's history with one watch (cost: the changes, not the keys in the
  range), complete up to a fence key it writes (a single watcher's events arrive in
  revision order). Compacted when that history is gone.
- Errors: Conflict, NotFound, Unavailable (after `retries` with exponential backoff),
  never a raw gRPC exception. Reads and guarded writes retry on any transient failure;
  unguarded writes (blind puts/deletes, same state if applied twice) on UNAVAILABLE.
  An Unavailable from a write means its outcome is unknown: re-read before acting.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from seglake.names import parse_endpoints
from seglake.errors import ConfigError, Conflict, SeglakeError, Unavailable

MAX_TXN_OPS = 128  # etcd's default --max-txn-ops
MAX_TXN_BYTES = 1_400_000  # under etcd's default 1.5 MiB --max-request-bytes, with headroom
_OP_OVERHEAD = 16
_MARKER_BYTES = 512  # the write marker's put + compare, counted against MAX_TXN_BYTES
MARKER_TTL = 600  # seconds a write marker outlives its transaction (lease)
T = TypeVar("T")


class Compacted(Unavailable):
    """The revision history a read needs was compacted away: read the current state instead."""


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    mod_revision: int
    create_revision: int
    version: int
    lease: int = 0            # the lease the key is attached to (0: none)


@dataclass(frozen=True)
class Put:
    key: str
    value: bytes | str
    lease: int | None = None

    def size(self) -> int:
        return len(self.key) + len(self.value) + _OP_OVERHEAD


@dataclass(frozen=True)
class Delete:
    key: str
    prefix: bool = False  # delete every key under `key` (which should end with '/')

    def size(self) -> int:
        return 2 * len(self.key) + _OP_OVERHEAD


@dataclass(frozen=True)
class Compare:
    """`target(key) op value`, target one of version|mod|create|value."""

    key: str
    target: str
    op: str
    value: Any

    def size(self) -> int:
        return len(self.key) + _OP_OVERHEAD + (len(self.value) if self.target == "value" else 8)


def absent(key: str) -> Compare:
    """The key does not exist (create-if-absent)."""
    return Compare(key, "version", "==", 0)


def exists(key: str) -> Compare:
    return Compare(key, "version", ">", 0)


def unchanged(kv: KeyValue) -> Compare:
    """The key is still at the revision it was read at (compare-and-swap)."""
    return Compare(kv.key, "mod", "==", kv.mod_revision)


Op = Put | Delete


def chunk_ops(ops: Sequence[Op], guard: Sequence[Compare] = (),
              max_ops: int = MAX_TXN_OPS, max_bytes: int = MAX_TXN_BYTES) -> list[list[Op]]:
    """Split ops, in order, into chunks that each fit one transaction with the guard
    (and, when guarded, the write marker: one op and its compare)."""
    guard_bytes = sum(c.size() for c in guard)
    if guard:
        max_ops, guard_bytes = max_ops - 1, guard_bytes + _MARKER_BYTES
    chunks: list[list[Op]] = []
    cur: list[Op] = []
    cur_bytes = guard_bytes
    for op in ops:
        size = op.size()
        if guard_bytes + size > max_bytes:
            raise SeglakeError(f"etcd op on {op.key!r} is {size} bytes, over the {max_bytes} request limit")
        if cur and (len(cur) >= max_ops or cur_bytes + size > max_bytes):
            chunks.append(cur)
            cur, cur_bytes = [], guard_bytes
        cur.append(op)
        cur_bytes += size
    if cur:
        chunks.append(cur)
    return chunks


class KV:
    """A thin, typed facade over an etcd3-API client (cslab-etcd3, native protobuf)."""

    def __init__(self, endpoints: str | Sequence[str] = "127.0.0.1:2379", *, timeout: float = 10.0,
                 retries: int = 4, user: str = "", password: str = "", ca_cert: str = "",
                 max_message_bytes: int = 64 << 20, root: str = "seglake"):
        import importlib

        from seglake.meta.keys import Keys

        import etcd3  # heavy; imported on use so the engine imports fast

        etcd_client_mod = importlib.import_module("etcd3.client")  # the module, not etcd3.client()

        if isinstance(endpoints, str):
            endpoints = [e.strip() for e in endpoints.split(",") if e.strip()]
        if not endpoints:
            raise SeglakeError("no etcd endpoint configured")
        if bool(user) != bool(password):  # the client would raise a bare Exception
            raise ConfigError("etcd_user and etcd_password must be set together "
                              f"(etcd_user {'set' if user else 'empty'}, etcd_password {'set' if password else 'empty'})")
        self._etcd3 = etcd3
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.retries = retries
        self.marker_keys = Keys(root)  # where write markers live (under the root: etcd RBAC by prefix)
        self._marker_lease: tuple[int, float] | None = None  # (lease id, granted at, monotonic)
        self._lease_lock = threading.Lock()
        creds = None
        if ca_cert:
            creds = etcd_client_mod.MultiEndpointEtcd3Client.get_secure_creds(ca_cert)
        opts = [("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", max_message_bytes)]
        # One endpoint: retry it at once after a failure (the library's default would
        # refuse it for 300 s). Several: fail over, retry a failed one after 2 s.
        time_retry = 0.0 if len(self.endpoints) == 1 else 2.0
        eps = []
        for host, port in parse_endpoints("etcd endpoint", ",".join(self.endpoints)):  # host:port, 1..65535
            eps.append(etcd_client_mod.Endpoint(host, port, secure=bool(creds), creds=creds,
                                                time_retry=time_retry, opts=opts))
        self._client = self._call(
            lambda: etcd_client_mod.MultiEndpointEtcd3Client(
                endpoints=eps, timeout=timeout, user=user or None, password=password or None,
                failover=True),
            write=False, what="connect")

    @classmethod
    def from_settings(cls, s) -> "KV":
        return cls(s.etcd_endpoint, timeout=s.etcd_timeout, retries=s.etcd_retries,
                   user=s.etcd_user, password=s.etcd_password, ca_cert=s.etcd_ca_cert,
                   root=s.etcd_root)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "KV":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- error handling -------------------------------------------------------------
    def _call(self, fn: Callable[[], T], *, write: bool, what: str) -> T:
        import grpc
        from etcd3 import exceptions as ex

        delay = 0.05
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except (ex.ConnectionFailedError, ex.NoServerAvailableError, ex.ConnectionTimeoutError,
                    ex.InternalServerError, grpc.RpcError, ValueError) as e:
                retryable = _retryable(e, write)
                self._mark_failed(e)
                if not retryable or attempt == self.retries:
                    if isinstance(e, ValueError) and not _is_failed_node(e):
                        raise
                    raise Unavailable(f"etcd {what} failed on {','.join(self.endpoints)}: "
                                      f"{_describe(e)}") from None
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    def _mark_failed(self, e: Exception) -> None:
        """Calls made on the raw stub bypass the library's failover bookkeeping."""
        import grpc

        if isinstance(e, grpc.RpcError) and hasattr(e, "code") and e.code() in (
                grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            try:
                self._client.endpoint_in_use.fail()
                self._client._clear_old_stubs()
            except Exception:  # noqa: BLE001 - bookkeeping only
                pass

    # -- reads ------------------------------------------------------------------------
    def get(self, key: str) -> KeyValue | None:
        def do():
            resp = self._client.get_response(key)
            return _kv(resp.kvs[0]) if resp.kvs else None
        return self._call(do, write=False, what=f"get {key}")

    def get_many(self, keys: Sequence[str]) -> dict[str, KeyValue | None]:
        """Many single-key reads, up to MAX_TXN_OPS per round trip (a read-only txn,
        each chunk one consistent revision). Missing keys map to None."""
        from etcd3 import etcdrpc
        from etcd3 import transactions as etx

        out: dict[str, KeyValue | None] = {}
        for chunk in batched(list(dict.fromkeys(keys)), MAX_TXN_OPS):
            request = etcdrpc.TxnRequest(compare=[], failure=[],
                                         success=self._client._ops_to_requests([etx.Get(k) for k in chunk]))
            resp = self._call(lambda r=request: self._client.kvstub.Txn(
                r, self.timeout, credentials=self._client.call_credentials, metadata=self._client.metadata),
                write=False, what=f"get {len(chunk)} keys")
            for key, item in zip(chunk, resp.responses, strict=True):
                kvs = item.response_range.kvs
                out[key] = _kv(kvs[0]) if kvs else None
        return out

    def range(self, prefix: str, *, page_size: int = 1000, keys_only: bool = False,
              start_after: str | None = None, revision: int | None = None,
              min_mod_revision: int | None = None, end: str | None = None) -> Iterator[KeyValue]:
        """Every key under `prefix` (and below `end` if given: the key range
        [prefix, end) then), in key order, paged, at one consistent revision
        (`revision`, or the store's revision at the first page); with min_mod_revision
        only keys changed since then. The next page is fetched in the background while
        the caller consumes this one."""
        from etcd3 import utils

        end = utils.prefix_range_end(utils.to_bytes(prefix)) if end is None else utils.to_bytes(end)
        start = utils.to_bytes(prefix if start_after is None else start_after + "\0")

        def fetch(start: bytes, revision: int | None):
            return self._call(lambda: self._client.get_range_response(
                start, end, limit=page_size, revision=revision, keys_only=keys_only,
                min_mod_revision=min_mod_revision),
                write=False, what=f"range {prefix}")

        resp = fetch(start, revision)
        revision = revision or resp.header.revision
        pool = None
        try:
            while True:
                nxt = None
                if resp.more and resp.kvs:
                    if pool is None:
                        pool = ThreadPoolExecutor(1, thread_name_prefix="etcd-range")
                    nxt = pool.submit(fetch, resp.kvs[-1].key + b"\0", revision)
                for item in resp.kvs:
                    yield _kv(item)
                if nxt is None:
                    return
                resp = nxt.result()
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def count(self, prefix: str, *, end: str | None = None, revision: int | None = None) -> int:
        """How many keys under `prefix` (or in [prefix, end)), at `revision` if given."""
        from etcd3 import utils

        end = utils.prefix_range_end(utils.to_bytes(prefix)) if end is None else utils.to_bytes(end)
        resp = self._call(lambda: self._client.get_range_response(prefix, end, count_only=True, revision=revision),
                          write=False, what=f"count {prefix}")
        return resp.count

    def cluster_id(self) -> int:
        """The etcd cluster's id (every response's header carries it): a copy of a root in
        another cluster answers with another one."""
        resp = self._call(lambda: self._client.get_response("\0"), write=False, what="cluster id")
        return int(resp.header.cluster_id)

    def revision(self) -> int:
        """The store's current revision."""
        resp = self._call(lambda: self._client.get_response("\0"), write=False, what="revision")
        return resp.header.revision

    def changes(self, lo: str, hi: str, since: int, fence: str,
                deadline: float | None = None) -> tuple[dict[str, KeyValue | None], int]:
        """({key: its value after its last change, None if that change deleted it} for
        every key in [lo, hi) changed at revision `since` or later, the revision R the
        answer is complete up to). Read from etcd's history with ONE watch from `since`:
        the cost is the number of changes, not of keys in the range. Completeness needs
        no progress notification (unordered before etcd 3.4.24/3.5.8): `fence`, a key in
        [lo, hi), is first written (leased, so it expires) at revision R, and a single
        watcher's events arrive in revision order, so once the fence's own event arrives
        every change before R has been seen. Compacted when the history from `since` is
        gone; Unavailable on any other failure (after retries), never a partial answer."""
        import queue

        from etcd3 import etcdrpc, utils

        if not lo <= fence < hi:
            raise ValueError(f"fence {fence!r} must lie in the watched range [{lo!r}, {hi!r})")
        fence_rev = self.put(fence, b"", lease=self._marker_lease_id())
        if since > fence_rev:
            return {}, fence_rev
        deadline = deadline or max(60.0, 6 * self.timeout)
        create = etcdrpc.WatchRequest(create_request=etcdrpc.WatchCreateRequest(
            key=utils.to_bytes(lo), range_end=utils.to_bytes(hi), start_revision=since))

        def read() -> dict[str, KeyValue | None]:
            requests: queue.Queue = queue.Queue()
            requests.put(create)
            stream = etcdrpc.WatchStub(self._client.channel).Watch(iter(requests.get, None), deadline,
                                                  credentials=self._client.call_credentials,
                                                  metadata=self._client.metadata)
            out: dict[str, KeyValue | None] = {}
            try:
                for resp in stream:
                    if resp.compact_revision:
                        raise Compacted(f"etcd history before revision {resp.compact_revision} is compacted: "
                                        f"the changes since revision {since} cannot be read from it")
                    if resp.canceled:
                        raise Unavailable(f"etcd watch from revision {since} was canceled: {resp.cancel_reason}")
                    for ev in resp.events:
                        if ev.kv.mod_revision >= fence_rev:  # the fence: everything before it was seen
                            return out
                        kv = _kv(ev.kv)
                        out[kv.key] = None if ev.type == ev.DELETE else kv
                raise Unavailable(f"etcd watch from revision {since} ended before revision {fence_rev}")
            finally:
                requests.put(None)
                stream.cancel()

        return self._call(read, write=False, what=f"changes in {lo}..{hi} since {since}"), fence_rev

    # -- writes -----------------------------------------------------------------------
    def put(self, key: str, value: bytes | str, lease: int | None = None) -> int:
        return self.txn([], [Put(key, value, lease)])

    def delete(self, key: str) -> int:
        return self.txn([], [Delete(key)])

    def txn(self, compares: Sequence[Compare], ops: Sequence[Op],
            reason: str | None = None) -> int:
        """One transaction. Returns its revision; raises Conflict if a compare fails.
        Guarded (compares given): exactly-once across retries, see the module doc."""
        guarded = bool(compares)
        limit = MAX_TXN_OPS - 1 if guarded else MAX_TXN_OPS  # one slot for the marker
        if len(ops) > limit or len(compares) > limit:
            raise SeglakeError(f"transaction of {len(ops)} ops, {len(compares)} compares exceeds "
                               f"{limit}; use write()")
        from etcd3 import etcdrpc
        from etcd3 import transactions as etx

        tx = self._client.transactions
        marker = self.marker_keys.txn_marker(uuid.uuid4().hex) if guarded else ""

        def build():
            cs, success, failure = list(compares), list(ops), []
            if guarded:
                cs.append(absent(marker))
                success.append(Put(marker, b"", self._marker_lease_id()))
                failure.append(etx.Get(marker))
            return etcdrpc.TxnRequest(
                compare=[_compare(tx, c).build_message() for c in cs],
                success=self._client._ops_to_requests([_op(tx, o) for o in success]),
                failure=self._client._ops_to_requests(failure))
        request = build()

        def do():
            nonlocal request
            stub = self._client.kvstub
            try:
                return stub.Txn(request, self.timeout, credentials=self._client.call_credentials,
                                metadata=self._client.metadata)
            except Exception as e:
                if not (guarded and _lease_not_found(e)):
                    raise
                with self._lease_lock:  # the marker lease is gone (revoked): nothing was applied
                    self._marker_lease = None
                request = build()
                return stub.Txn(request, self.timeout, credentials=self._client.call_credentials,
                                metadata=self._client.metadata)
        try:
            resp = self._call(do, write=not guarded, what="txn")
        except Unavailable as e:
            raise Unavailable(f"{e} (the transaction may or may not have been applied: "
                              "re-read before acting on it)") from None
        if not resp.succeeded:
            if guarded:
                mine = resp.responses[0].response_range.kvs
                if mine:  # an earlier attempt of this very write landed: it is done
                    return mine[0].mod_revision
            keys = ", ".join(sorted({c.key for c in compares}))
            raise Conflict(reason or f"concurrent change on {keys}")
        return resp.header.revision

    def _marker_lease_id(self) -> int:
        """A lease for write markers, granted lazily and replaced at half its TTL, so a
        marker outlives every retry of its write by minutes and then expires."""
        with self._lease_lock:
            now = time.monotonic()
            if self._marker_lease is None or now - self._marker_lease[1] > MARKER_TTL / 2:
                self._marker_lease = (self.grant_lease(MARKER_TTL), now)
            return self._marker_lease[0]

    def write(self, ops: Sequence[Op], guard: Sequence[Compare] = (),
              reason: str | None = None, ordered: bool = True, inflight: int = 4) -> int:
        """Apply any number of ops, chunked. ordered=True: chunks one after another, in
        order (children before parents). ordered=False, for independent peer records
        only: up to `inflight` chunks at once. Returns the highest revision written."""
        chunks = chunk_ops(ops, guard)
        if ordered or len(chunks) == 1:
            rev = 0
            for chunk in chunks:
                rev = self.txn(guard, chunk, reason)
            return rev
        with ThreadPoolExecutor(inflight, thread_name_prefix="etcd-write") as pool:
            return max(pool.map(lambda c: self.txn(guard, c, reason), chunks))

    def delete_prefix(self, prefix: str, page_size: int = 1000) -> int:
        """Delete a prefix page by page (etcd 3.4 slows after one huge delete_range)."""
        n = 0
        while True:
            keys = [kv.key for kv in islice(self.range(prefix, page_size=page_size, keys_only=True),
                                            page_size)]
            if not keys:
                return n
            self.write([Delete(k) for k in keys])
            n += len(keys)

    # -- leases -----------------------------------------------------------------------
    def grant_lease(self, ttl: int) -> int:
        lease = self._call(lambda: self._client.lease(int(ttl)), write=True, what="lease grant")
        return lease.id

    def refresh_lease(self, lease_id: int) -> None:
        self._call(lambda: list(self._client.refresh_lease(lease_id)), write=True, what="lease refresh")

    def revoke_lease(self, lease_id: int) -> None:
        self._call(lambda: self._client.revoke_lease(lease_id), write=True, what="lease revoke")

    def lease_ttl(self, lease_id: int) -> int:
        info = self._call(lambda: self._client.get_lease_info(lease_id), write=False, what="lease info")
        return int(info.TTL)


def _kv(item) -> KeyValue:
    return KeyValue(item.key.decode(), item.value, item.mod_revision, item.create_revision, item.version,
                    item.lease)


def _compare(tx, c: Compare):
    target = {"version": tx.version, "mod": tx.mod, "create": tx.create, "value": tx.value}[c.target](c.key)
    value = c.value.encode() if isinstance(c.value, str) else c.value
    if c.op == "==":
        return target == value
    if c.op == "!=":
        return target != value
    if c.op == "<":
        return target < value
    if c.op == ">":
        return target > value
    raise ValueError(f"unknown compare op {c.op!r}")


def _op(tx, o: Op):
    if isinstance(o, Put):
        return tx.put(o.key, o.value, lease=o.lease)
    if isinstance(o, Delete):
        if o.prefix:
            from etcd3 import utils
            return tx.delete(o.key, range_end=utils.prefix_range_end(utils.to_bytes(o.key)))
        return tx.delete(o.key)
    raise TypeError(f"not an etcd op: {o!r}")


def _lease_not_found(e: Exception) -> bool:
    import grpc

    return (isinstance(e, grpc.RpcError) and hasattr(e, "code") and e.code() == grpc.StatusCode.NOT_FOUND
            and "lease not found" in (e.details() or ""))


def _is_failed_node(e: Exception) -> bool:
    return isinstance(e, ValueError) and "failed node" in str(e)


def _retryable(e: Exception, write: bool) -> bool:
    import grpc
    from etcd3 import exceptions as ex

    if isinstance(e, ValueError):
        return _is_failed_node(e)
    if isinstance(e, (ex.ConnectionFailedError, ex.NoServerAvailableError)):
        return True  # never reached a server: safe for writes too
    if isinstance(e, grpc.RpcError):
        code = e.code() if hasattr(e, "code") else None
        if code == grpc.StatusCode.UNAVAILABLE:
            return True
        if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL):
            return not write
        return False
    return not write  # timeouts / internal errors: the outcome of a write is unknown


def _describe(e: Exception) -> str:
    import grpc

    if isinstance(e, grpc.RpcError) and hasattr(e, "code"):
        return f"{e.code().name}: {e.details()}"
    return str(e) or type(e).__name__


CAS_ATTEMPTS = 20


def retry_on_conflict(attempt: Callable[[], T], what: str, attempts: int = CAS_ATTEMPTS) -> T:
    """Run a read-check-write `attempt` until its compare-guarded write wins: a Conflict
    means someone changed the record in between, so read again and re-check."""
    for _ in range(attempts):
        try:
            return attempt()
        except Conflict:
            continue
    raise Conflict(f"{what}: persistent contention after {attempts} attempts")


def batched(items: Iterable[T], n: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for it in items:
        batch.append(it)
        if len(batch) >= n:
            yield batch
            batch = []
    if batch:
        yield batch
