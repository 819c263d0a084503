"""Reading seglake's Parquet logs: one checked opener (segfiles.put_parquet writes them)."""

from __future__ import annotations

from typing import BinaryIO


def open_checked(f: BinaryIO):
    """A pyarrow ParquetFile whose reads check every page written with a CRC-32
    (segfiles.put_parquet writes them): a page whose bytes changed raises, it is never
    decoded into other values. Every reader of seglake's logs opens them through it."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(f, page_checksum_verification=True)
