"""Parquet encoding of binlogs (one column group per field) and footer reads."""

from __future__ import annotations

from typing import BinaryIO


def table_bytes(columns: dict) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(columns), sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def row_count(f: BinaryIO) -> int:
    """Rows recorded in a Parquet footer (reads the footer only)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(f).metadata.num_rows
