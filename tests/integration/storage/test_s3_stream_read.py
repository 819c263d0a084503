"""S3Store.open_read of a large object streams it (a real SeaweedFS): bounded memory, any
position readable, a body cut mid-read resumed from the byte it stopped at, an object
replaced while it is read refused (never a mix of two versions)."""

import hashlib
import io
import os
import tracemalloc

import pytest

from seglake.errors import SeglakeError
from seglake.storage import s3 as s3mod

BIG = 3 << 20


@pytest.fixture
def small_whole(monkeypatch):
    """Objects above 64 KiB are streamed (the real threshold is 8 MiB: same code, smaller files)."""
    monkeypatch.setattr(s3mod, "READ_WHOLE", 64 << 10)
    monkeypatch.setattr(s3mod, "STREAM_BUFFER", 64 << 10)


def test_a_large_object_is_streamed_in_bounded_memory_and_readable_anywhere(s3_store, small_whole):
    data = os.urandom(BIG)
    s3_store.put("big/obj", data)
    tracemalloc.start()
    try:
        h = hashlib.sha256()
        with s3_store.open_read("big/obj") as f:
            assert not isinstance(f, io.BytesIO)
            for chunk in iter(lambda: f.read(256 << 10), b""):
                h.update(chunk)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()
    assert peak < BIG // 3, f"{peak} bytes held to hash a {BIG}-byte object"
    with s3_store.open_read("big/obj") as f:
        for pos, n in [(BIG - 8, 8), (17, 1000), (BIG // 2, 300_000), (0, 5), (BIG - 3, 100)]:
            f.seek(pos)
            assert f.read(n) == data[pos:pos + n]
        f.seek(-4, io.SEEK_END)
        assert f.read() == data[-4:] and f.read(10) == b""
    with s3_store.open_read("big/obj") as f:
        assert f.read() == data


def test_a_parquet_file_is_read_through_the_stream(s3_store, small_whole):
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.table({"pk": list(range(200_000)), "v": [float(i) for i in range(200_000)]})
    buf = io.BytesIO()
    pq.write_table(t, buf, row_group_size=50_000)
    s3_store.put("big/t.parquet", buf.getvalue())
    with s3_store.open_read("big/t.parquet") as f:
        assert pq.ParquetFile(f).read().equals(t)


class _CutBody:
    """A response body that delivers `after` bytes, then fails like a reset connection."""

    def __init__(self, body, after: int):
        self.body, self.left = body, after

    def read(self, n):
        from botocore.exceptions import ResponseStreamingError
        if self.left <= 0:
            raise ResponseStreamingError(error="connection reset by peer (test)")
        data = self.body.read(min(n, self.left))
        self.left -= len(data)
        return data

    def close(self):
        self.body.close()


def test_a_body_cut_mid_read_resumes_where_it_stopped(s3_store, small_whole):
    data = os.urandom(BIG)
    s3_store.put("big/cut", data)
    with s3_store.open_read("big/cut") as f:
        f.raw._body = _CutBody(f.raw._body, after=1_000_003)
        assert f.read() == data


def test_an_object_replaced_while_it_is_read_is_refused(s3_store, small_whole):
    s3_store.put("big/swap", os.urandom(BIG))
    with s3_store.open_read("big/swap") as f:
        f.read(100_000)
        s3_store.put("big/swap", os.urandom(BIG))
        f.seek(BIG // 2)        # the open response ends here: the next read asks for that version again
        with pytest.raises(SeglakeError, match="replaced or deleted while it was read"):
            f.read(10)
    s3_store.put("big/gone", os.urandom(BIG))
    with s3_store.open_read("big/gone") as f:
        f.read(10)
        s3_store.delete_checked(["big/gone"])
        f.seek(BIG - 100)
        with pytest.raises(SeglakeError, match="replaced or deleted"):
            f.read(10)
