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


def row_count(f: BinaryIO) -> int:
    """Rows recorded in a Parquet footer (reads the footer only)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(f).metadata.num_rows
