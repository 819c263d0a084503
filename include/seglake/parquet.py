"""Parquet encoding of binlogs (one column group per field) and footer reads."""

from __future__ import annotations

from typing import BinaryIO


def table_bytes(columns: dict) -> bytes:
    return table_buffer(columns).to_pybytes()


def table_buffer(columns: dict):
    """The Parquet file as a pyarrow Buffer (no copy into a bytes object)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(columns), sink, compression="zstd")
    return sink.getvalue()


def open_checked(f: BinaryIO):
    """A pyarrow ParquetFile whose reads check every page written with a CRC-32
    (segfiles.put_parquet writes them): a page whose bytes changed raises, it is never
    decoded into other values. Every reader of seglake's logs opens them through it."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(f, page_checksum_verification=True)
