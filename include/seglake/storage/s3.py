"""S3 store (boto3): paginated listing, server-side copy, DeleteObjects in 1000s.

Credentials come from the settings (or, inside Airflow, the `aws_default` connection
through the hook) and otherwise from boto3's default chain; they are never logged.
"""

from __future__ import annotations

import io
from typing import BinaryIO, Iterable, Iterator

from seglake.errors import NotFound, SeglakeError, Unavailable
from seglake.storage.base import ChecksumMismatch, DeleteError, DeleteOutcome, ObjectInfo, Store
from seglake.storage.layout import check_key, normalize_key, normalize_prefix

DELETE_BATCH = 1000
MAX_COPY_OBJECT = 5 * 1024**3


def parse_s3_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise ValueError(f"not an s3:// uri: {uri!r}")
    rest = uri[5:]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"s3 uri without a bucket: {uri!r}")
    return bucket, prefix.strip("/")


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
        if self._client is None:
            import boto3
            from botocore.config import Config

            a = self._client_args
            kwargs = dict(region_name=a["region"] or None,
                          config=Config(max_pool_connections=a["max_pool"],
                                        retries={"max_attempts": 5, "mode": "standard"},
                                        s3={"addressing_style": "path"}))
            if a["endpoint"]:
                kwargs["endpoint_url"] = a["endpoint"]
            if a["access_key"]:
                kwargs["aws_access_key_id"] = a["access_key"]
                kwargs["aws_secret_access_key"] = a["secret_key"]
            self._client = boto3.client("s3", **kwargs)
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
            return SeglakeError(f"S3 {what} {key!r} failed: {code} {e.response.get('Error', {}).get('Message', '')}")
        if isinstance(e, BotoCoreError):
            return Unavailable(f"S3 {what} {key!r} failed: {e}")
        return e

    def _do(self, what: str, key: str, fn):
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            return fn()
        except (ClientError, BotoCoreError) as e:
            raise self._err(e, what, key) from None

    # Store ------------------------------------------------------------------------------
    def list(self, prefix: str = "", report_unreadable: bool = False) -> Iterator[ObjectInfo]:
        pfx = normalize_prefix(prefix)
        yield from self._list_full(f"{self.base}/{pfx}" if self.base else pfx)

    def _list_full(self, full: str) -> Iterator[ObjectInfo]:
        """Every object under the exact bucket prefix `full`, keys exactly as listed."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=full, PaginationConfig={"PageSize": 1000})
        it = iter(pages)
        while True:
            page = self._do("list", self._rel(full), lambda: next(it, None))
            if page is None:
                return
            for obj in page.get("Contents", []):
                if obj["Key"].endswith("/"):
                    continue  # directory marker
                yield ObjectInfo(self._rel(obj["Key"]), obj["Size"], obj["LastModified"].timestamp())

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
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=full, Delimiter="/", PaginationConfig={"PageSize": 1000})
        dirs, files = [], []
        it = iter(pages)
        while True:
            page = self._do("list", pfx, lambda: next(it, None))
            if page is None:
                return dirs, files
            for p in page.get("CommonPrefixes", []):
                rel = self._rel(p["Prefix"])
                try:
                    dirs.append(check_key(rel[:-1]) + "/")
                except ValueError:  # 'a//', '/', ... : list() cannot take it; its objects come back here
                    files += self._list_full(p["Prefix"])
            files += [ObjectInfo(self._rel(o["Key"]), o["Size"], o["LastModified"].timestamp())
                      for o in page.get("Contents", []) if not o["Key"].endswith("/")]

    def head(self, key: str) -> ObjectInfo:
        r = self._do("head", key, lambda: self.client.head_object(Bucket=self.bucket, Key=self._full(key)))
        return ObjectInfo(normalize_key(key), r["ContentLength"], r["LastModified"].timestamp())

    def get(self, key: str) -> bytes:
        r = self._do("get", key, lambda: self.client.get_object(Bucket=self.bucket, Key=self._full(key)))
        return r["Body"].read()

    def open_read(self, key: str) -> BinaryIO:
        return io.BytesIO(self.get(key))

    def put(self, key: str, data: bytes) -> ObjectInfo:
        self._do("put", key, lambda: self.client.put_object(Bucket=self.bucket, Key=self._full(key), Body=data))
        return self.head(key)

    def copy(self, src: str, dst: str, atomic: bool = True) -> ObjectInfo:
        """Server-side: no bytes pass through this process. Always atomic on S3."""
        source = {"Bucket": self.bucket, "Key": self._full(src)}
        info = self.head(src)
        if info.size <= MAX_COPY_OBJECT:
            self._do("copy", src, lambda: self.client.copy_object(
                Bucket=self.bucket, Key=self._full(dst), CopySource=source))
        else:  # multipart UploadPartCopy, still server-side
            self._do("copy", src, lambda: self.client.copy(source, self.bucket, self._full(dst)))
        return ObjectInfo(normalize_key(dst), info.size, info.mtime)

    def checksum(self, key: str) -> str:
        """The object's MD5 as S3 records it (its ETag; no download). A multipart ETag is
        not a content hash: those objects are streamed and hashed here instead."""
        r = self._do("head", key, lambda: self.client.head_object(Bucket=self.bucket, Key=self._full(key)))
        etag = r.get("ETag", "").strip('"')
        return f"md5:{etag}" if etag and "-" not in etag else super().checksum(key)

    def copy_checked(self, src: str, dst: str) -> tuple[ObjectInfo, str]:
        """Server-side copy (atomic on S3), checked by comparing the target's ETag (from
        the copy's answer) with the source's: the same requests as copy()."""
        source = {"Bucket": self.bucket, "Key": self._full(src)}
        head = self._do("head", src, lambda: self.client.head_object(**source))
        want = head.get("ETag", "").strip('"')
        if head["ContentLength"] > MAX_COPY_OBJECT or not want or "-" in want:
            return super().copy_checked(src, dst)
        r = self._do("copy", src, lambda: self.client.copy_object(
            Bucket=self.bucket, Key=self._full(dst), CopySource=source))
        got = r.get("CopyObjectResult", {}).get("ETag", "").strip('"')
        if got != want:
            raise ChecksumMismatch(f"copy of {src} to {dst}: target ETag {got}, source {want}")
        return ObjectInfo(normalize_key(dst), head["ContentLength"], head["LastModified"].timestamp()), f"md5:{want}"

    def delete_checked(self, objects: Iterable[str | ObjectInfo]) -> DeleteOutcome:
        """DeleteObjects in 1000s of exactly the keys given (never a normalised one; S3
        has no symlinks). An ObjectInfo is first HEADed (in parallel): gone -> missing,
        another size or a Last-Modified more than a second off (HEAD has second
        precision) -> changed and kept. S3 cannot delete conditionally, so an object
        rewritten between that HEAD and the delete is not detected."""
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
            resp = self._do("delete", batch[0], lambda: self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": self._full(k)} for k in batch], "Quiet": True}))
            failed = {}
            for err in resp.get("Errors", []):
                if err.get("Code") not in ("NoSuchKey",):
                    failed[self._rel(err["Key"])] = f"{err.get('Code')}: {err.get('Message')}"
            out.errors += [DeleteError(k, e) for k, e in failed.items()]
            out.deleted += [k for k in batch if k not in failed]
        return out

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
        from botocore.exceptions import ClientError
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError:
            self._do("create bucket", self.bucket, lambda: self.client.create_bucket(Bucket=self.bucket))
