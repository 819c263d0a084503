"""S3 store (boto3): paginated listing, server-side copy, DeleteObjects in 1000s.

One file on purpose (~660 lines): it is one backend of the Store contract; listing,
copies and multipart uploads share one client, its retries (_do: every request) and
its error mapping.

Copies never move an object's bytes through this process: CopyObject up to
MAX_COPY_OBJECT (S3's 5 GiB limit), above it (and for any source uploaded in parts) an
explicit multipart copy whose parts are UploadPartCopy ranges, several in flight.

Credentials come from the settings (or, inside Airflow, the `aws_default` connection
through the hook) and otherwise from boto3's default chain; they are never logged.
"""

from __future__ import annotations

import binascii
import datetime
import hashlib
import io
import os
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import accumulate
from typing import BinaryIO, Callable, Iterable, Iterator

from seglake.errors import NotFound, SeglakeError, Unavailable
from seglake.storage.base import (
    ChecksumMismatch, DeleteError, DeleteOutcome, Listed, ObjectInfo, Store, crc_name, crc_update)
from seglake.storage.layout import check_key, normalize_key, normalize_prefix

DELETE_BATCH = 1000
MAX_COPY_OBJECT = 5 * 1024**3   # CopyObject's limit; larger objects are copied in parts
COPY_PART_SIZE = 512 * 1024**2  # part size of a multipart copy of a source not uploaded in parts
MAX_PARTS = 10_000              # S3's limit on the parts of one upload
PARTS_IN_FLIGHT = 8             # UploadPartCopy requests in flight for one object
DESCRIBE_PAGE = 1000            # ListObjectsV2's largest page
STREAM_CHUNK = 8 << 20          # bounded read size where a check must stream (see _verify_parts)
READ_WHOLE = 8 << 20            # open_read: an object up to this size is read at once, a larger one streamed
STREAM_BUFFER = 1 << 20         # the buffer of a streamed read
SPOOL_BYTES = 8 << 20           # put_writer keeps up to this much in memory, the rest in a temporary file
_MD5 = re.compile(r"[0-9a-f]{32}")
_CLIENT_LOCK = threading.Lock()  # S3Store.client: one client per store, built once
_MULTIPART = re.compile(r"([0-9a-f]{32})-([0-9]{1,5})")

# Transient failures (a server restarting, overloaded or briefly unreachable) are retried
# here, on every request the store makes, with a bounded exponential backoff: botocore's
# own retries share one per-client quota that a restart under a dozen threads drains, and
# then every call failed at once (a GC sweep child failed on a SeaweedFS InternalError
# right after a restart). What is retried is a whole request (a listing page with its own
# continuation token, never "the rest of a listing"), so a retried listing is still the
# complete listing or an error: nothing ever passes a partial view for complete.
RETRY_ATTEMPTS = 8       # tries of one request, the first included
RETRY_BASE = 0.25        # seconds before the first retry; doubling, with jitter
RETRY_CAP = 4.0          # the longest wait between two tries (~12 s of waits in all, at most ~16 s)
TRANSIENT_CODES = frozenset({
    "InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout", "RequestTimeoutException",
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled", "TooManyRequests",
    "TooManyRequestsException", "PriorRequestNotComplete", "BandwidthLimitExceeded", "EC2ThrottledException",
    "500", "502", "503", "504"})


def transient(e: BaseException) -> bool:
    """True for a failure a retry of the same request may not meet: a 5xx or throttling
    answer, a connection refused / reset / timed out, a body cut off mid-read. A 4xx
    answer (not found, denied, precondition failed) and a TLS failure are not."""
    from botocore.exceptions import (
        ClientError, ConnectionError as BotoConnectionError, HTTPClientError, IncompleteReadError, SSLError)

    if isinstance(e, ClientError):
        code = str(e.response.get("Error", {}).get("Code", ""))
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return code in TRANSIENT_CODES or status >= 500
    if isinstance(e, SSLError):
        return False
    return isinstance(e, (BotoConnectionError, HTTPClientError, IncompleteReadError))


def backoff(attempt: int) -> float:
    """The wait before try `attempt + 1` (attempt >= 1): RETRY_BASE doubling up to
    RETRY_CAP, full jitter on its upper half (threads hitting one restart spread out)."""
    step = min(RETRY_CAP, RETRY_BASE * 2 ** (attempt - 1))
    return step / 2 + random.random() * step / 2


class _Reader(io.RawIOBase):
    """One object version (its ETag, as the first GET answered), read from any position:
    a read continues the open response while it is where the reader is, else a ranged GET
    with If-Match from there; a body cut mid-read (a transient failure) is resumed with a
    ranged GET from the byte it stopped at, RETRY_ATTEMPTS times at most per read; an
    object replaced meanwhile is an error, never a mix of two versions."""

    def __init__(self, store: "S3Store", key: str, first: dict):
        super().__init__()
        self._store, self._key, self._full = store, key, store._full(key)
        self._etag, self._size = first["ETag"], first["ContentLength"]
        self._body, self._body_at, self._pos = first["Body"], 0, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def _drop_body(self) -> None:
        if self._body is not None:
            self._body.close()
            self._body = None

    def _open_at(self, pos: int) -> None:
        from botocore.exceptions import ClientError

        self._drop_body()

        def get():
            try:
                return self._store.client.get_object(Bucket=self._store.bucket, Key=self._full,
                                                     Range=f"bytes={pos}-", IfMatch=self._etag)
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412", "NoSuchKey", "404"):
                    return None
                raise
        r = self._store._do("get", self._key, get)
        if r is None:
            raise SeglakeError(f"object {self._key!r} in {self._store.uri} was replaced or deleted while it was "
                               f"read; read it again")
        self._body, self._body_at = r["Body"], pos

    def readinto(self, b) -> int:
        from botocore.exceptions import BotoCoreError

        want = min(len(b), self._size - self._pos)
        if want <= 0:
            return 0
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            if self._body is None or self._body_at != self._pos:
                self._open_at(self._pos)
            try:
                data = self._body.read(want)
            except BotoCoreError as e:
                if attempt == RETRY_ATTEMPTS or not transient(e):
                    raise self._store._err(e, "get", self._key) from None
                self._drop_body()
                time.sleep(backoff(attempt))
                continue
            if not data:        # the body ended before the object did: resume from here
                self._drop_body()
                continue
            n = len(data)
            b[:n] = data
            self._pos += n
            self._body_at += n
            return n
        raise Unavailable(f"S3 get {self._key!r}: the body ended at byte {self._pos} of {self._size}, "
                          f"{RETRY_ATTEMPTS} times")

    def close(self) -> None:
        self._drop_body()
        super().close()


def _etag(answer: dict) -> str:
    return answer.get("ETag", "").strip('"')


def _fast_timestamps(client):
    """The client, its answers' timestamps parsed by _timestamp: its endpoint gets a
    parser factory of its own (botocore's shared one, and every other client, are left
    as they are). A botocore without that attribute keeps its own parser."""
    from botocore.parsers import ResponseParserFactory

    endpoint = getattr(client, "_endpoint", None)
    if endpoint is not None and hasattr(endpoint, "_response_parser_factory"):
        factory = ResponseParserFactory()
        factory.set_parser_defaults(timestamp_parser=_timestamp)
        endpoint._response_parser_factory = factory
    return client


_WEEKDAYS = frozenset(("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"))


def _timestamp(value):
    """botocore's timestamp parser, with the ISO-8601 form of S3's XML answers (one per
    listed key: LastModified) parsed by datetime.fromisoformat: ~0.1 us instead of
    dateutil's ~90 us, which was most of a listed key's client CPU; and the HTTP-date of
    every GET's and HEAD's Last-Modified header ("Sun, 22 Nov 2026 12:08:31 GMT") by
    email.utils: ~12 us instead of ~175 us per request."""
    if isinstance(value, str) and len(value) > 19 and value[10] == "T" and value[-1] == "Z":
        try:
            return datetime.datetime.fromisoformat(value)
        except ValueError:
            pass
    if isinstance(value, str) and len(value) == 29 and value[3] == "," and value.endswith(" GMT") \
            and value[:3] in _WEEKDAYS:   # (email.utils would take any three letters there)
        from email.utils import parsedate_to_datetime
        try:
            return parsedate_to_datetime(value)   # GMT: an aware datetime in UTC
        except (ValueError, TypeError):
            pass
    from botocore.utils import parse_timestamp
    return parse_timestamp(value)


def _md5_of(etag: str) -> str:
    """The content MD5 an ETag vouches for ('' for a multipart or otherwise opaque ETag)."""
    return etag if _MD5.fullmatch(etag) else ""


def composite_etag(part_etags: list[str]) -> str:
    """The ETag S3 gives an object completed from parts with these MD5 ETags."""
    digest = hashlib.md5(b"".join(binascii.unhexlify(e) for e in part_etags)).hexdigest()
    return f"{digest}-{len(part_etags)}"


# A bucket as S3 names them (3-63 characters: lowercase labels of letters, digits and
# '-' joined by single dots, not an IPv4 address); a prefix of path segments joined by
# single '/', each starting with a letter, digit or '_' (so no '.', '..', hidden or empty
# segment), no trailing '/', no backslash or percent-escape. Full match, nothing mended.
_LABEL = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_BUCKET_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*", re.ASCII)
_SEGMENT = r"[A-Za-z0-9_][A-Za-z0-9_.=-]*"
_S3_URI_RE = re.compile(rf"s3://([^/]*)((?:/{_SEGMENT})*)", re.ASCII)
_IPV4_RE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+", re.ASCII)
MAX_PREFIX = 512


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix) of `s3://bucket` or `s3://bucket/a/b`; ValueError for anything
    else, before any request is made."""
    m = _S3_URI_RE.fullmatch(uri) if isinstance(uri, str) else None
    if m is None:
        raise ValueError(f"{uri!r} is not s3://bucket or s3://bucket/prefix: the prefix is path segments of "
                         "letters, digits, '_', '.', '=', '-' (each starting with a letter, digit or '_') joined "
                         "by single '/', with no trailing '/', '.', '..', '%' escape or backslash")
    bucket, prefix = m.group(1), m.group(2)[1:]
    if not (3 <= len(bucket) <= 63 and _BUCKET_RE.fullmatch(bucket)) or _IPV4_RE.fullmatch(bucket):
        raise ValueError(f"{uri!r}: {bucket!r} is not an S3 bucket name (3-63 lowercase letters, digits, '-' "
                         "and single dots, starting and ending with a letter or digit)")
    if len(prefix) > MAX_PREFIX:
        raise ValueError(f"{uri[:40]!r}...: the prefix is longer than {MAX_PREFIX} characters")
    return bucket, prefix


class S3Store(Store):
    def __init__(self, uri: str, *, endpoint: str = "", region: str = "us-east-1",
                 access_key: str = "", secret_key: str = "", max_pool: int = 32, client=None):
        self.uri = uri
        self.bucket, self.base = parse_s3_uri(uri)
        self._client = client
        self._client_args = dict(endpoint=endpoint, region=region, access_key=access_key,
                                 secret_key=secret_key, max_pool=max_pool)

    def __getstate__(self):  # picklable for Spark executors: the client is rebuilt there
        d = dict(self.__dict__)
        d["_client"] = None
        return d

    @property
    def client(self):
        """The store's one boto3 client, built on first use. Built under a lock: copy and
        listing threads start together, and boto3's default session is not thread-safe
        (two threads would each build a client, or fail inside botocore)."""
        if self._client is not None:
            return self._client
        with _CLIENT_LOCK:
            if self._client is not None:
                return self._client
            import boto3
            from botocore.config import Config

            a = self._client_args
            kwargs = dict(region_name=a["region"] or None,
                          config=Config(max_pool_connections=a["max_pool"],
                                        # a quick retry of its own (a stale pooled connection);
                                        # the backoff across an outage is _do's
                                        retries={"max_attempts": 2, "mode": "standard"},
                                        s3={"addressing_style": "path"}))
            if a["endpoint"]:
                kwargs["endpoint_url"] = a["endpoint"]
            if a["access_key"]:
                kwargs["aws_access_key_id"] = a["access_key"]
                kwargs["aws_secret_access_key"] = a["secret_key"]
            self._client = _fast_timestamps(boto3.client("s3", **kwargs))
        return self._client

    # key mapping ------------------------------------------------------------------------
    def _full(self, key: str) -> str:
        k = normalize_key(key)  # reads and writes; deletes pass check_key first
        return f"{self.base}/{k}" if self.base else k

    def _rel(self, full: str) -> str:
        return full[len(self.base) + 1:] if self.base else full

    def _err(self, e: Exception, what: str, key: str = ""):
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(e, ClientError):
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchKey", "NotFound"):
                return NotFound(f"object {key!r} not found in {self.uri}")
            if code in ("NoSuchBucket",):
                return SeglakeError(f"bucket {self.bucket!r} does not exist ({self.uri})")
            if transient(e):
                return Unavailable(f"S3 {what} {key!r} failed after {RETRY_ATTEMPTS} tries: {code} "
                                   f"{e.response.get('Error', {}).get('Message', '')}")
            return SeglakeError(f"S3 {what} {key!r} failed: {code} {e.response.get('Error', {}).get('Message', '')}")
        if isinstance(e, BotoCoreError):
            return Unavailable(f"S3 {what} {key!r} failed: {e}")
        return e

    def _do(self, what: str, key: str, fn):
        """fn() (one request), retried while it fails transiently (see `transient`), at
        most RETRY_ATTEMPTS tries; then, or on any other boto error, the typed error."""
        from botocore.exceptions import BotoCoreError, ClientError
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            try:
                return fn()
            except (ClientError, BotoCoreError) as e:
                if attempt == RETRY_ATTEMPTS or not transient(e):
                    raise self._err(e, what, key) from None
            time.sleep(backoff(attempt))

    # Store ------------------------------------------------------------------------------
    def list(self, prefix: str = "", report_unreadable: bool = False) -> Iterator[ObjectInfo]:
        pfx = normalize_prefix(prefix)
        yield from self._list_full(f"{self.base}/{pfx}" if self.base else pfx)

    def _pages(self, full: str, delimiter: bool = False) -> Iterator[dict]:
        """Every page of one ListObjectsV2 of the exact bucket prefix `full`, or an error:
        each page is one request (retried as such by _do: the same continuation token
        again, so a retried page can neither skip nor repeat), a page that still fails
        raises, and so does a page that says more follow without a continuation token
        (boto's paginator would end there quietly,
        and a listing must never pass for complete when it is not) or that names a key
        outside `full` (cut to the store's key space, it would name another object)."""
        kwargs = {"Bucket": self.bucket, "Prefix": full, "MaxKeys": 1000}
        if delimiter:
            kwargs["Delimiter"] = "/"
        token = None
        while True:
            ask = dict(kwargs, ContinuationToken=token) if token else kwargs
            page = self._do("list", self._rel(full), lambda: self.client.list_objects_v2(**ask))
            names = [o["Key"] for o in page.get("Contents", [])] + [p["Prefix"] for p in page.get("CommonPrefixes", [])]
            stray = next((n for n in names if not n.startswith(full)), None)
            if stray is not None:
                raise Unavailable(f"S3 list {self._rel(full)!r} in {self.uri} answered {stray!r}, outside the prefix "
                                  f"{full!r}: the listing cannot be trusted")
            yield page
            if not page.get("IsTruncated"):
                return
            if not page.get("NextContinuationToken"):
                raise Unavailable(f"S3 list {self._rel(full)!r} in {self.uri}: a page says more objects follow "
                                  "but gives no continuation token: the listing is incomplete")
            if page["NextContinuationToken"] == token:  # (boto's paginator refused this too)
                raise Unavailable(f"S3 list {self._rel(full)!r} in {self.uri}: a page repeats its own continuation "
                                  "token: the listing would not end")
            token = page["NextContinuationToken"]

    def _list_full(self, full: str) -> Iterator[ObjectInfo]:
        """Every object under the exact bucket prefix `full`, keys exactly as listed."""
        for obj in self._list_raw(full):
            yield ObjectInfo(self._rel(obj["Key"]), obj["Size"], obj["LastModified"].timestamp())

    def _list_raw(self, full: str) -> Iterator[dict]:
        """The listing entries (Key, Size, LastModified, ETag) under the bucket prefix
        `full` (checked pages, see _pages), directory markers left out."""
        for page in self._pages(full):
            yield from (obj for obj in page.get("Contents", []) if not obj["Key"].endswith("/"))

    def _listed(self, obj: dict) -> Listed:
        etag = _etag(obj)
        return Listed(self._rel(obj["Key"]), obj["Size"], obj["LastModified"].timestamp(), etag, _md5_of(etag))

    def list_described(self, prefix: str) -> Iterator[Listed]:
        pfx = normalize_prefix(prefix)
        yield from map(self._listed, self._list_raw(f"{self.base}/{pfx}" if self.base else pfx))

    def describe(self, keys: Iterable[str]) -> dict[str, Listed]:
        """Size, mtime and ETag of `keys` from listings, no request per key: the keys are
        sorted and grouped by their first path segment (insert_log, index_files, ...);
        each group is read in ListObjectsV2 pages under the group's common directory,
        each page starting (StartAfter) at the directory of the smallest key not yet
        reached, so the gaps between the wanted keys (other segments, other builds'
        files) are skipped. The first page asks for exactly the keys wanted, each next
        one for twice the wanted keys the last one held (doubling after a page of none):
        a page as dense as the last one covers as many wanted keys. Keys that sit
        together, as a copy task's segments do, cost one page per group per DESCRIBE_PAGE
        keys and list nothing else; keys alternating with others two pages; in any
        layout the pages carry at most ~3x the keys wanted (plus what sits in their own
        directories), scattered keys costing a page each. Nothing is
        inferred from a key's absence (SeaweedFS lists in directory order, not byte
        order): a key not seen is left out (unknown), so an ordering the walk does not
        expect only costs the caller its fallback (a HEAD), never a wrong answer."""
        rel = {self._full(k): normalize_key(k) for k in keys}
        groups: dict[str, list[str]] = {}
        for full in sorted(rel):
            groups.setdefault(full[len(self.base) + 1 if self.base else 0:].split("/", 1)[0], []).append(full)
        out: dict[str, Listed] = {}
        for wanted in groups.values():
            common = os.path.commonprefix(wanted)
            prefix = common[:common.rfind("/") + 1]
            seen = {full: None for full in wanted}
            i, cursor, ask = 0, "", len(wanted)
            while i < len(wanted):
                start = max(wanted[i].rpartition("/")[0] + "/", cursor)
                ask = min(DESCRIBE_PAGE, ask)
                page = self._do("list", self._rel(prefix.rstrip("/")), lambda: self.client.list_objects_v2(
                    Bucket=self.bucket, Prefix=prefix, StartAfter=start, MaxKeys=ask))
                contents, found = page.get("Contents", []), 0
                for obj in contents:
                    if obj["Key"] in seen:
                        seen[obj["Key"]] = out[rel[obj["Key"]]] = self._listed(obj)
                        found += 1
                if not page.get("IsTruncated") or not contents or contents[-1]["Key"] <= start:
                    break  # the group is read to its end (or the server is not ordered: stop)
                cursor = contents[-1]["Key"]
                ask = 2 * found if found else 2 * ask  # as dense as this page was; probe past a gap
                while i < len(wanted) and (wanted[i] <= cursor or seen[wanted[i]] is not None):
                    i += 1
        return out

    def list_names(self, prefix: str, start: str, report_unreadable: bool = False) -> Iterator[ObjectInfo]:
        """One paginated listing of Prefix=prefix+start (not cut at a '/': S3 and
        SeaweedFS both take any string), keeping the objects below a child prefix that
        `list_level` returns as a directory."""
        pfx = normalize_prefix(prefix)
        full = f"{self.base}/{pfx}" if self.base else pfx
        for o in self._list_full(full + start):
            name, slash, _ = o.key[len(pfx):].partition("/")
            if not slash:
                continue  # directly in `prefix`: list_level's
            try:
                check_key(pfx + name)
            except ValueError:
                continue  # 'a//...': list_level returns these objects as files
            yield o

    def list_level(self, prefix: str = "", report_unreadable: bool = False) -> tuple[list[str], list[ObjectInfo]]:
        pfx = normalize_prefix(prefix)
        full = f"{self.base}/{pfx}" if self.base else pfx
        dirs, files = [], []
        for page in self._pages(full, delimiter=True):
            for p in page.get("CommonPrefixes", []):
                rel = self._rel(p["Prefix"])
                try:
                    dirs.append(check_key(rel[:-1]) + "/")
                except ValueError:  # 'a//', '/', ... : list() cannot take it; its objects come back here
                    files += self._list_full(p["Prefix"])
            files += [ObjectInfo(self._rel(o["Key"]), o["Size"], o["LastModified"].timestamp())
                      for o in page.get("Contents", []) if not o["Key"].endswith("/")]
        # each name once, even if a server repeats one across pages: a unit listed twice
        # would judge (and count) its objects twice
        return list(dict.fromkeys(dirs)), list({o.key: o for o in files}.values())

    def head(self, key: str) -> ObjectInfo:
        r = self._do("head", key, lambda: self.client.head_object(Bucket=self.bucket, Key=self._full(key)))
        return ObjectInfo(normalize_key(key), r["ContentLength"], r["LastModified"].timestamp())

    def get(self, key: str) -> bytes:
        # the body's read inside the retried request: a connection cut mid-body is retried too
        return self._do("get", key, lambda: self.client.get_object(Bucket=self.bucket, Key=self._full(key))["Body"].read())

    def read_upto(self, key: str, n: int) -> bytes:
        """The object's first `n` bytes (all of it when shorter): one GET, read inside the
        retried request (a body cut mid-way is read again whole), no stream reader."""
        full = self._full(key)

        def get() -> bytes:
            body = self.client.get_object(Bucket=self.bucket, Key=full)["Body"]
            try:
                return body.read(n)
            finally:
                body.close()
        return self._do("get", key, get)

    def open_read(self, key: str) -> BinaryIO:
        """A seekable reader. An object up to READ_WHOLE bytes is read at once (a Parquet
        reader seeks around it); a larger one is streamed (_Reader: at most one buffer of
        it in memory, the same version throughout, a cut body resumed where it stopped)."""
        full = self._full(key)
        first = self._do("get", key, lambda: self.client.get_object(Bucket=self.bucket, Key=full))
        if first["ContentLength"] <= READ_WHOLE:
            from botocore.exceptions import BotoCoreError
            try:
                return io.BytesIO(first["Body"].read())
            except BotoCoreError as e:   # cut mid-body: the whole request again, retried like any
                if not transient(e):
                    raise self._err(e, "get", key) from None
                return io.BytesIO(self.get(key))
            finally:
                first["Body"].close()
        return io.BufferedReader(_Reader(self, key, first), buffer_size=STREAM_BUFFER)

    def put(self, key: str, data: bytes) -> ObjectInfo:
        self._do("put", key, lambda: self.client.put_object(Bucket=self.bucket, Key=self._full(key), Body=data))
        return self.head(key)

    def put_exclusive(self, key: str, body: bytes) -> bool:
        """One PUT with If-None-Match: * -- True when this call created `key`, False when
        it existed before. A transient failure is retried like every request; a retry
        that meets 412 may be meeting this call's own first PUT (it landed, its answer was
        lost), so the object is read and compared: the same bytes are this call's write
        (callers name keys uniquely; WAL fragment names carry 48 random bits)."""
        from botocore.exceptions import BotoCoreError, ClientError

        tried = False
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            try:
                self.client.put_object(Bucket=self.bucket, Key=self._full(key), Body=body, IfNoneMatch="*")
                return True
            except ClientError as e:
                code = e.response.get("Error", {}).get("Code", "")
                if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                    return tried and self._holds(key, body)
                if attempt == RETRY_ATTEMPTS or not transient(e):
                    raise self._err(e, "put", key) from None
            except BotoCoreError as e:
                if attempt == RETRY_ATTEMPTS or not transient(e):
                    raise self._err(e, "put", key) from None
            tried = True
            time.sleep(backoff(attempt))
        raise AssertionError("unreachable")

    def _holds(self, key: str, body: bytes) -> bool:
        try:
            return self.get(key) == body
        except NotFound:
            return False

    def put_writer(self, key: str, write) -> ObjectInfo:
        """write(file) into a spooled buffer (memory up to SPOOL_BYTES, then a temporary
        file), then one upload (multipart above the transfer threshold): the object
        appears whole or not at all, and a big object never sits in memory. An exception
        from write() uploads nothing."""
        import tempfile

        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as buf:
            write(buf)

            def upload():
                buf.seek(0)  # each try uploads the whole buffer again
                self.client.upload_fileobj(buf, self.bucket, self._full(key))
            self._do("put", key, upload)
        return self.head(key)

    def copy(self, src: str, dst: str, atomic: bool = True) -> ObjectInfo:
        """Server-side: no bytes pass through this process. Always atomic on S3."""
        head = self._do("head", src, lambda: self.client.head_object(Bucket=self.bucket, Key=self._full(src)))
        if head["ContentLength"] <= MAX_COPY_OBJECT:
            self._do("copy", src, lambda: self.client.copy_object(
                Bucket=self.bucket, Key=self._full(dst), CopySource={"Bucket": self.bucket, "Key": self._full(src)}))
        else:
            self._multipart_copy(src, dst, head, check=False)
        return ObjectInfo(normalize_key(dst), head["ContentLength"], head["LastModified"].timestamp())

    def checksum(self, key: str) -> str:
        """The object's MD5 as S3 records it (its ETag; no download). A multipart ETag is
        not a content hash: those objects are streamed (in bounded pieces) and hashed."""
        r = self._do("head", key, lambda: self.client.head_object(Bucket=self.bucket, Key=self._full(key)))
        etag = _etag(r)
        if _MD5.fullmatch(etag):
            return f"md5:{etag}"
        crc = 0
        for chunk in self._stream(key, 0, r["ContentLength"]):
            crc = crc_update(chunk, crc)
        return crc_name(crc)

    def copy_checked(self, src: str, dst: str) -> tuple[ObjectInfo, str]:
        """Server-side copy (atomic on S3) whose content is checked without reading it:
        up to MAX_COPY_OBJECT, one CopyObject whose answer's ETag must equal the source's
        MD5 ETag (HEAD + copy: two requests). A larger source, or one uploaded in parts
        (its ETag is no MD5), goes through _multipart_copy. Raises ChecksumMismatch."""
        source = {"Bucket": self.bucket, "Key": self._full(src)}
        head = self._do("head", src, lambda: self.client.head_object(**source))
        want, size = _etag(head), head["ContentLength"]
        info = ObjectInfo(normalize_key(dst), size, head["LastModified"].timestamp())
        if size > MAX_COPY_OBJECT or (size and _MULTIPART.fullmatch(want)):
            self._multipart_copy(src, dst, head, check=True)
            return info, f"etag:{want}"
        if not _MD5.fullmatch(want):  # no content hash from this server: compare streamed checksums
            return super().copy_checked(src, dst)
        r = self._do("copy", src, lambda: self.client.copy_object(
            Bucket=self.bucket, Key=self._full(dst), CopySource=source))
        self._check_copied(src, dst, _etag(r.get("CopyObjectResult", {})), want)
        return info, f"md5:{want}"

    def copy_listed(self, src: Listed, dst: str) -> tuple[ObjectInfo, str]:
        """One request: CopyObject conditional on the source still having the listed
        ETag (CopySourceIfMatch: the server copies that content or nothing, 412 ->
        ChecksumMismatch), and the answer's ETag must equal the listed MD5 too (for a
        server that would ignore the condition): the content is checked, not the size
        alone. A source whose ETag is no MD5 (uploaded in parts, or another server's
        tags), or above MAX_COPY_OBJECT, goes through copy_checked."""
        if not src.md5 or src.size > MAX_COPY_OBJECT:
            return self.copy_checked(src.key, dst)
        from botocore.exceptions import ClientError

        def copy():
            try:
                return self.client.copy_object(
                    Bucket=self.bucket, Key=self._full(dst), CopySourceIfMatch=f'"{src.etag}"',
                    CopySource={"Bucket": self.bucket, "Key": self._full(src.key)})
            except ClientError as e:
                if e.response.get("Error", {}).get("Code", "") in ("PreconditionFailed", "412"):
                    raise ChecksumMismatch(f"copy of {src.key} to {dst}: the source changed after it was listed "
                                           f"(its ETag is no longer {src.etag})") from None
                raise
        r = self._do("copy", src.key, copy)
        self._check_copied(src.key, dst, _etag(r.get("CopyObjectResult", {})), src.md5)
        return ObjectInfo(normalize_key(dst), src.size, src.mtime), f"md5:{src.md5}"

    def _check_copied(self, src: str, dst: str, got: str, want: str) -> None:
        """A CopyObject's answer ETag against the source's MD5; on a mismatch the copy is
        deleted (it holds other content than the source had) and ChecksumMismatch raised."""
        if got != want:
            self._discard(dst)
            raise ChecksumMismatch(f"copy of {src} to {dst}: target ETag {got}, source {want}")

    def _discard(self, key: str) -> None:
        try:
            self._do("delete", key, lambda: self.client.delete_object(Bucket=self.bucket, Key=self._full(key)))
        except Exception:  # noqa: BLE001 - the mismatch is the failure to report
            pass

    # multipart copy -----------------------------------------------------------------------
    def _multipart_copy(self, src: str, dst: str, head: dict, check: bool) -> None:
        """Copy `src` (as HEADed) to `dst` in UploadPartCopy ranges, PARTS_IN_FLIGHT at a
        time, each conditional on the source still having the HEADed ETag; any failure
        aborts the upload, so `dst` appears only whole. A source uploaded in parts is
        copied along its own part boundaries: on S3 each part's answer is the MD5 of the
        bytes copied, so they must compose into the source's ETag, checked BEFORE the
        upload is completed (a mismatch aborts it). When the answers cannot prove that
        (a server whose part ETags are no MD5s, such as SeaweedFS, or a single-part
        source above 5 GiB), the completed copy is checked by _verify_streamed."""
        size, want = head["ContentLength"], _etag(head)
        ranges, aligned = self._part_ranges(src, size, want)
        full_dst = self._full(dst)
        source = {"Bucket": self.bucket, "Key": self._full(src)}
        up = self._do("copy", src, lambda: self.client.create_multipart_upload(Bucket=self.bucket, Key=full_dst))
        upload = dict(Bucket=self.bucket, Key=full_dst, UploadId=up["UploadId"])

        def part(numbered: tuple[int, tuple[int, int]]) -> str:
            number, (offset, length) = numbered
            r = self._do("copy", src, lambda: self.client.upload_part_copy(
                PartNumber=number, CopySource=source, CopySourceIfMatch=head["ETag"],
                CopySourceRange=f"bytes={offset}-{offset + length - 1}", **upload))
            return _etag(r.get("CopyPartResult", {}))

        try:
            with ThreadPoolExecutor(max(1, min(PARTS_IN_FLIGHT, len(ranges)))) as pool:
                etags = list(pool.map(part, enumerate(ranges, 1)))
            proven = check and aligned and all(_MD5.fullmatch(e) for e in etags)
            if proven and composite_etag(etags) != want:
                raise ChecksumMismatch(f"copy of {src} to {dst}: parts compose to ETag "
                                       f"{composite_etag(etags)}, source {want}")
            self._do("copy", src, lambda: self.client.complete_multipart_upload(
                MultipartUpload={"Parts": [{"ETag": e, "PartNumber": i} for i, e in enumerate(etags, 1)]},
                **upload))
        except BaseException:
            try:
                self._do("copy", dst, lambda: self.client.abort_multipart_upload(**upload))
            except Exception:  # noqa: BLE001 - the original failure is the one to report
                pass
            raise
        if check and not proven:
            self._verify_streamed(src, dst, want, ranges, aligned)

    def _part_ranges(self, src: str, size: int, want: str) -> tuple[list[tuple[int, int]], bool]:
        """(offset, length) of each part to copy, and whether they are the source's own
        parts (their lengths read with HEAD ?partNumber=, in parallel, all of the HEADed
        version). Otherwise COPY_PART_SIZE pieces (larger when MAX_PARTS would not do)."""
        m = _MULTIPART.fullmatch(want)
        if m and 0 < int(m.group(2)) <= MAX_PARTS:
            def part_length(number: int) -> int:  # HEAD ?partNumber= answers that part's length
                return self._do("head", src, lambda: self.client.head_object(
                    Bucket=self.bucket, Key=self._full(src), PartNumber=number))["ContentLength"]

            n = int(m.group(2))
            with ThreadPoolExecutor(max(1, min(PARTS_IN_FLIGHT, n))) as pool:
                lengths = list(pool.map(part_length, range(1, n + 1)))
            if sum(lengths) == size and all(length > 0 for length in lengths):
                offsets = [0, *accumulate(lengths[:-1])]
                return list(zip(offsets, lengths)), True
        piece = max(COPY_PART_SIZE, -(-size // MAX_PARTS))
        return [(o, min(piece, size - o)) for o in range(0, size, piece)], False

    def _verify_streamed(self, src: str, dst: str, want: str, ranges, aligned: bool) -> None:
        """The fallback check, bytes streamed in STREAM_CHUNK pieces (never whole in
        memory): the destination's MD5 (per part and composed, when the copy follows the
        source's parts) against the source's ETag; when that ETag is no hash of the
        content that can be recomputed (e.g. SeaweedFS's ETag of an object itself made
        by UploadPartCopy), the source is streamed too and the MD5s compared. A mismatch
        deletes the destination."""
        def digests(key: str) -> tuple[list[str], str]:
            whole, parts = hashlib.md5(), []
            for offset, length in ranges:
                h = hashlib.md5()
                for chunk in self._stream(key, offset, length):
                    h.update(chunk)
                    whole.update(chunk)
                parts.append(h.hexdigest())
            return parts, whole.hexdigest()

        parts, got = digests(dst)
        if (aligned and composite_etag(parts) == want) or got == want:
            return
        expected = digests(src)[1]
        if got != expected:
            self._discard(dst)
            raise ChecksumMismatch(f"copy of {src} to {dst}: target MD5 {got}, source {expected}")

    def _stream(self, key: str, offset: int, length: int) -> Iterator[bytes]:
        """The bytes [offset, offset+length) of `key`, in STREAM_CHUNK pieces. A body cut
        off mid-read (transiently) is read on from where it stopped, by a new ranged GET:
        at most RETRY_ATTEMPTS such resumptions, each request retried by _do."""
        from botocore.exceptions import BotoCoreError
        end, resumed = offset + length, 0
        while offset < end:
            r = self._do("get", key, lambda: self.client.get_object(
                Bucket=self.bucket, Key=self._full(key), Range=f"bytes={offset}-{end - 1}"))
            try:
                for chunk in r["Body"].iter_chunks(STREAM_CHUNK):
                    offset += len(chunk)
                    yield chunk
            except BotoCoreError as e:
                resumed += 1
                if resumed >= RETRY_ATTEMPTS or not transient(e):
                    raise self._err(e, "get", key) from None
                time.sleep(backoff(resumed))
                continue
            if offset < end:  # a body shorter than its range: not the object asked for
                raise Unavailable(f"S3 get {key!r} in {self.uri}: the answer ended {end - offset} bytes short")

    def delete_checked(self, objects: Iterable[str | ObjectInfo],
                       guard: Callable[[], None] | None = None) -> DeleteOutcome:
        """DeleteObjects in 1000s of exactly the keys given (never a normalised one; S3
        has no symlinks). An ObjectInfo is first HEADed (in parallel): gone -> missing,
        another size or a Last-Modified more than a second off (HEAD has second
        precision) -> changed and kept. S3 cannot delete conditionally, so an object
        rewritten between that HEAD and the delete is not detected. `guard()` is called
        right before each DeleteObjects request (Store.delete_checked)."""
        out = DeleteOutcome()
        plain, expected = [], []
        for o in objects:
            key = o.key if isinstance(o, ObjectInfo) else o
            try:
                check_key(key)
            except ValueError as e:
                out.errors.append(DeleteError(key, str(e)))
                continue
            (expected if isinstance(o, ObjectInfo) else plain).append(o)
        if expected:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max(1, min(16, self._client_args["max_pool"]))) as pool:
                verdicts = list(pool.map(self._still_there, expected))
            for o, verdict in zip(expected, verdicts, strict=True):
                if verdict == "same":
                    plain.append(o.key)
                elif isinstance(verdict, DeleteError):
                    out.errors.append(verdict)
                else:
                    getattr(out, verdict).append(o.key)
        for i in range(0, len(plain), DELETE_BATCH):
            batch = plain[i:i + DELETE_BATCH]
            if guard is not None:
                guard()
            failed = self._delete_batch(batch)
            out.errors += [DeleteError(k, e) for k, e in failed.items()]
            out.deleted += [k for k in batch if k not in failed]
        return out

    def _delete_batch(self, batch: list[str]) -> dict[str, str]:
        """DeleteObjects of `batch` (exact keys): {key: error} of the keys not deleted.
        Keys the answer reports with a transient error (InternalError, SlowDown, ... in
        an HTTP 200 answer: botocore retries none of them) are asked again, alone, with
        the backoff of _do; a deleted key stays deleted, so a retry is harmless."""
        failed: dict[str, str] = {}
        todo = batch
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            resp = self._do("delete", todo[0], lambda: self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": self._full(k)} for k in todo], "Quiet": True}))
            again = []
            for err in resp.get("Errors", []):
                code, key = str(err.get("Code", "")), self._rel(err["Key"])
                if code in ("NoSuchKey",):
                    continue
                if code in TRANSIENT_CODES and attempt < RETRY_ATTEMPTS:
                    again.append(key)
                else:
                    failed[key] = f"{code}: {err.get('Message')}"
            if not again:
                break
            time.sleep(backoff(attempt))
            todo = again
        return failed

    def _still_there(self, o: ObjectInfo):
        try:
            now = self.head(o.key)
        except NotFound:
            return "missing"
        except SeglakeError as e:
            return DeleteError(o.key, str(e))
        if now.size != o.size or abs(now.mtime - o.mtime) >= 1.0:
            return "changed"
        return "same"

    def ensure_bucket(self) -> None:
        try:
            self._do("head bucket", self.bucket, lambda: self.client.head_bucket(Bucket=self.bucket))
        except SeglakeError:  # not there (or not ours to see): create it, or say why not
            self._do("create bucket", self.bucket, lambda: self.client.create_bucket(Bucket=self.bucket))
