"""bench/flush.py: the WAL flusher against its physical anchor, in one run.

Ingest 1,000,000 rows (int64 pk, 128-dim float32 vector, one float scalar; batches of
10,000, the shape of bench/wal.py) through WalClient, then flush the pchannel inline
(scanner with crc checks, buffers, Parquet binlogs per field + stats log, each put
atomically and fsynced, etcd transactions guarded by the flusher term). Anchor, in the
same run: pyarrow reading the same fragment files (records walked by their length
prefixes, no checks) and writing the same Parquet files (one per field, zstd, synced)
with no etcd.

    python bench/flush.py [--rows 1000000] [--batch 10000] [--dim 128] [--repeat 3]

Then 100,000 deletes spread over the flushed rows are appended and flushed (the flusher
stores them once, in an L0 delta log: visibility reads every delta log of the
collection); anchor: pyarrow reading the flushed pk column, finding the deleted pks and
writing their delta log.

Prints rows/s and MB/s for both and
    BENCH flush_inline_1M ratio=<flusher/anchor time> target=1.50 ok|miss
    BENCH flush_deletes_100k ratio=<flusher/anchor time> target=1.50 ok|miss
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (add_row_args, bench_tmpdir, fsync_path, ipc_batches, private_etcd, vector_schema,  # noqa: E402
                    verdict)


def anchor(frag_paths: list[Path], out: Path, fields: list[str], rows: int) -> float:
    """Read the fragments with plain pyarrow and write one Parquet file per field."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from seglake.wal.log import MAGIC

    t = time.perf_counter()
    batches = []
    for p in frag_paths:
        data = memoryview(p.read_bytes())
        pos = len(MAGIC) + 16
        end = len(data) - 24   # footer: u32 count, u64 bytes, u32 crc, 8-byte END
        while pos < end:
            n, _crc = struct.unpack_from("<II", data, pos)
            rec = data[pos + 8:pos + 8 + n]
            pos += 8 + n
            hlen, blen = struct.unpack_from("<II", rec, 0)
            if blen and json.loads(bytes(rec[8:8 + hlen]))["type"] == "Insert":
                batches += ipc_batches(rec[8 + hlen:8 + hlen + blen])
    table = pa.Table.from_batches(batches)
    assert table.num_rows == rows, (table.num_rows, rows)
    out.mkdir(parents=True, exist_ok=True)
    import numpy as np
    # the row model's system columns too: row id (field 0) and timestamp (field 1)
    system = {"RowID": np.arange(rows, dtype=np.int64),
              "Timestamp": np.repeat(np.arange(len(batches), dtype=np.int64), [b.num_rows for b in batches])}
    for name in [*system, *fields]:
        path = out / name
        col = system[name] if name in system else table.column(name)
        pq.write_table(pa.table({name: col}), path, compression="zstd")
        fsync_path(path)
    return time.perf_counter() - t


def anchor_deletes(pk_files: list[Path], dels, out: Path) -> float:
    """pyarrow reading the flushed pk columns, finding the deleted pks in them and
    writing their delta log (pk, ts), synced: what routing deletes to the segments that
    hold them costs at the least."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = time.perf_counter()
    hit = []
    for f in pk_files:
        pks = pq.read_table(f).column(0).to_numpy()
        hit.append(pks[np.isin(pks, dels)])
    hit = np.concatenate(hit)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"pk": hit, "ts": np.full(len(hit), 1, np.int64)}), out, compression="zstd")
    fsync_path(out)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_row_args(ap)
    args = ap.parse_args(argv)
    if min(args.rows, args.batch, args.dim, args.repeat) < 1:
        ap.error("every count must be >= 1")

    from seglake.config import Settings
    from seglake.lifecycle.flush import flush_pchannel
    from seglake.meta import Meta
    from seglake.storage.local import LocalStore
    from seglake.wal.client import WalClient, synthetic_rows
    from seglake.wal.log import WalLog

    schema = vector_schema(args.dim)
    with private_etcd() as etcd, bench_tmpdir("flush") as d:
        flushes, anchors, del_flushes, del_anchors = [], [], [], []
        for r in range(args.repeat):   # a fresh log per repeat (a flushed log is not flushed twice)
            settings = Settings.from_dict({"etcd_endpoint": etcd.endpoint, "etcd_root": f"bench{r}",
                                           "store_uri": str(Path(d) / f"store{r}"),
                                           "flush_seal_rows": max(args.rows, 1), "flush_seal_bytes": 1 << 40})
            meta, store = Meta.from_settings(settings), LocalStore(Path(d) / f"store{r}")
            with WalClient(meta, store, settings, batch_rows=args.batch) as client:
                coll = client.create_collection("bench", schema, shards=1)
                table = synthetic_rows(coll, args.rows, 1)
                client.insert("bench", table)
            p = coll.vchannels[0].rsplit("_", 1)[0]
            log = WalLog(meta, store, p)
            frags = [Path(store.uri) / rec.key for rec in log.fragments()]
            mb = sum(f.stat().st_size for f in frags) / 1e6
            anchors.append(anchor(frags, Path(d) / f"anchor{r}", [f["name"] for f in schema], args.rows))
            t = time.perf_counter()
            st = flush_pchannel(meta, store, p, settings, flush_all=True)
            flushes.append(time.perf_counter() - t)
            assert st["rows"] == args.rows and st["segments"] == 1, st
            # 100,000 deletes spread over the flushed rows (every 10th pk), then flushed
            import numpy as np
            from seglake.storage import layout
            from seglake.visibility import visible_count
            dels = np.arange(1, args.rows + 1, 10, dtype=np.int64)
            with WalClient(meta, store, settings, batch_rows=args.batch) as client:
                client.delete("bench", dels)
            (seg,) = [s for s in meta.segments.list(coll.collection_id) if s.num_rows]
            pk_files = [Path(store.uri) / layout.insert_log(seg.collection_id, seg.partition_id, seg.segment_id,
                                                            100, b.log_id) for b in seg.binlogs[100]]
            del_anchors.append(anchor_deletes(pk_files, dels, Path(d) / f"anchor{r}" / "delta"))
            t = time.perf_counter()
            st = flush_pchannel(meta, store, p, settings, flush_all=True)
            del_flushes.append(time.perf_counter() - t)
            assert st["deletes"] == len(dels) and st["delta_logs"] == 1, st
            assert visible_count(meta, store, coll.collection_id) == args.rows - len(dels)
            meta.close()
        t_flush, t_anchor = statistics.median(flushes), statistics.median(anchors)
        print(f"{args.rows} rows, {mb:.1f} MB of WAL fragments")
        print(f"flush inline: {t_flush:.2f} s ({args.rows / t_flush:,.0f} rows/s, {mb / t_flush:.0f} MB/s); "
              f"anchor (pyarrow read + Parquet write, no etcd) {t_anchor:.2f} s "
              f"({args.rows / t_anchor:,.0f} rows/s, {mb / t_anchor:.0f} MB/s)  [medians of {args.repeat}: "
              f"flush {', '.join(f'{x:.2f}' for x in flushes)}; anchor {', '.join(f'{x:.2f}' for x in anchors)}]")
        verdict("flush_inline_1M", t_flush, t_anchor, 1.50)
        t_del, t_del_anchor = statistics.median(del_flushes), statistics.median(del_anchors)
        print(f"{len(dels):,} deletes flushed: {t_del:.2f} s; anchor (pyarrow reads the pk column, finds them, "
              f"writes the delta log) {t_del_anchor:.2f} s  [flush {', '.join(f'{x:.2f}' for x in del_flushes)}; "
              f"anchor {', '.join(f'{x:.2f}' for x in del_anchors)}]")
        verdict("flush_deletes_100k", t_del, t_del_anchor, 1.50)
    return 0


if __name__ == "__main__":
    sys.exit(main())
