"""bench/wal.py: the write-ahead log against its physical anchors, in one run.

1. Append 1,000,000 rows (int64 pk, 128-dim float32 vector, one float scalar) as
   batches of 10,000 through WalClient.insert (validation, routing, fragment with
   per-record crc, fsync, exclusive create, etcd commit). Anchor: the same Arrow IPC
   bytes written as the same number of files straight into a directory of the same
   disk, each synced (an acknowledged WAL append is durable, so is the anchor's file;
   the unsynced figure is printed for reference).
2. Scan them back through a recovery Scanner (crc checks, decode, reorder, txn buffer)
   vs a raw read of the anchor files (read + Arrow IPC decode).
3. Single-row appends one after another: latency p50/p99 with the batching window
   (published anchors: Woodpecker on local disk ~1.8 ms, Kafka ~58 ms).

    python bench/wal.py [--rows 1000000] [--batch 10000] [--dim 128] [--single 300] [--repeat 3]

Prints MB/s for both sides and
    BENCH wal_append_1M ratio=<wal/anchor time> target=1.30 ok|miss
    BENCH wal_scan_1M ratio=<wal/anchor time> target=1.50 ok|miss
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (add_row_args, bench_tmpdir, fsync_path, ipc_batches, private_etcd, vector_schema,  # noqa: E402
                    verdict, write_synced)


def ipc_bytes(batch) -> bytes:
    import pyarrow as pa
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


def anchor_write(dirpath: Path, blobs: list[bytes], sync: bool) -> float:
    dirpath.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    for i, b in enumerate(blobs):
        write_synced(dirpath / f"{i:08d}.arrow", b, sync)
    if sync:
        fsync_path(dirpath)
    return time.perf_counter() - t


def anchor_read(dirpath: Path) -> tuple[float, int]:
    t = time.perf_counter()
    rows = 0
    for p in sorted(dirpath.iterdir()):
        rows += sum(b.num_rows for b in ipc_batches(p.read_bytes()))
    return time.perf_counter() - t, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_row_args(ap)
    ap.add_argument("--single", type=int, default=300)
    args = ap.parse_args(argv)
    if min(args.rows, args.batch, args.dim, args.single, args.repeat) < 1:
        ap.error("every count must be >= 1")

    from seglake.config import Settings
    from seglake.meta import Meta
    from seglake.storage.local import LocalStore
    from seglake.wal.client import WalClient, synthetic_rows
    from seglake.wal.message import MessageId
    from seglake.wal.scanner import recovery_scanner

    schema = vector_schema(args.dim)
    with private_etcd() as etcd, bench_tmpdir("wal") as d:
        settings = Settings.from_dict({"etcd_endpoint": etcd.endpoint, "etcd_root": "bench",
                                       "store_uri": str(Path(d) / "store")})
        meta, store = Meta.from_settings(settings), LocalStore(Path(d) / "store")
        client = WalClient(meta, store, settings, batch_rows=args.batch)
        coll = client.create_collection("bench", schema, shards=1)
        table = synthetic_rows(coll, args.rows, 1)
        batches = table.to_batches(max_chunksize=args.batch)
        blobs = [ipc_bytes(b) for b in batches]
        mb = sum(len(b) for b in blobs) / 1e6
        print(f"{args.rows} rows, {len(batches)} batches, {mb:.1f} MB of Arrow IPC", flush=True)

        reps = args.repeat
        t_raw_nosync = anchor_write(Path(d) / "anchor-nosync", blobs, sync=False)
        anchors, wals = [], []
        for r in range(reps):   # alternate the two sides; medians of `repeat`
            anchors.append(anchor_write(Path(d) / f"anchor{r}", blobs, sync=True))
            t = time.perf_counter()
            res = client.insert("bench", table)
            wals.append(time.perf_counter() - t)
        start = MessageId.parse(res.positions[res.pchannels[0]][0])   # the last copy of the table in the log
        t_anchor, t_wal = statistics.median(anchors), statistics.median(wals)
        print(f"append: wal {t_wal:.2f} s ({mb / t_wal:.0f} MB/s); anchor synced {t_anchor:.2f} s "
              f"({mb / t_anchor:.0f} MB/s); anchor unsynced {t_raw_nosync:.2f} s ({mb / t_raw_nosync:.0f} MB/s)"
              f"  [medians of {reps}: wal {', '.join(f'{x:.2f}' for x in wals)}; "
              f"anchor {', '.join(f'{x:.2f}' for x in anchors)}]")
        verdict("wal_append_1M", t_wal, t_anchor, 1.30)

        p = coll.vchannels[0].rsplit("_", 1)[0]
        scans, reads = [], []
        for r in range(reps):
            t = time.perf_counter()
            rows = 0
            sc = recovery_scanner(meta, store, p, settings, follow=False, max_pending=64,
                                  start=start)
            for m in sc:
                rows += m.rows if m.type == "Insert" else 0
            scans.append(time.perf_counter() - t)
            t_read, raw_rows = anchor_read(Path(d) / "anchor0")
            reads.append(t_read)
            assert rows == raw_rows == args.rows, (rows, raw_rows)
        t_scan, t_read = statistics.median(scans), statistics.median(reads)
        print(f"scan: wal {t_scan:.2f} s ({mb / t_scan:.0f} MB/s); raw read {t_read:.2f} s ({mb / t_read:.0f} MB/s)"
              f"  [medians of {reps}]")
        verdict("wal_scan_1M", t_scan, t_read, 1.50)

        lat = []
        one = synthetic_rows(coll, args.single, 10**12)
        for i in range(args.single):
            t = time.perf_counter()
            client.insert("bench", one.slice(i, 1))
            lat.append((time.perf_counter() - t) * 1000)
        lat.sort()
        p50 = statistics.median(lat)
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        print(f"single-row append latency: p50 {p50:.2f} ms p99 {p99:.2f} ms over {args.single} appends "
              f"(batching window {settings.wal_batch_time * 1000:.0f} ms; Woodpecker local ~1.8 ms, Kafka ~58 ms)")
        client.close()
        meta.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
