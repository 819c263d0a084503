"""bench/meta.py: save 100,000 segment records through seglake and read them back,
against the physical anchor measured in the same run: the raw etcd3 client writing the
same bytes as 128-op transactions and reading them with the same paged range reads.

    python bench/meta.py [--segments 100000]

Targets: seglake within 1.5x of the raw client for both the write and the read.
Allocation: a global TSO timestamp comes from a batch reserved by one CAS per batch
(at most BATCH_MAX_AGE old), so it costs well under the anchor, the raw client's get of
one key in the same run -- target 1.5x (kept from the read-per-timestamp TSO); an id
from a reserved block costs no round trip -- target under 1% of that read. The `tso:`
line gives reserve(64) and how far the mark is from the wall clock after the loops.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import private_etcd, raw_paged_read, timed, verdict  # noqa: E402


def make_segments(n: int):
    from seglake.meta.segments import FLUSHED, Binlog, IndexFile, Segment

    segs = []
    for i in range(n):
        sid = 1_000_000 + i
        log = 10_000_000 + i * 10
        segs.append(Segment(
            segment_id=sid, collection_id=100 + i % 50, partition_id=200 + i % 4,
            channel=f"seglake-dml_{i % 16}_{100 + i % 50}v{i % 2}", state=FLUSHED, num_rows=100_000,
            binlogs={f: (Binlog(log + f - 100, 4_000_000 + i, 100_000, 1 << 40, (1 << 40) + i),)
                     for f in (100, 101, 102)},
            deltalogs=(Binlog(log + 5, 12_000, 800, 1 << 40, 1 << 40),),
            statslogs={100: (Binlog(log + 6, 2048, 100_000, 1 << 40, (1 << 40) + i),)},
            index_files=(IndexFile(log + 7, 1, "centroids", 65536), IndexFile(log + 7, 1, "index_meta.json", 96)),
            start_ts=1 << 40, dml_ts=(1 << 40) + i, created_ts=1 << 40))
    return segs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--segments", type=int, default=100_000)
    args = ap.parse_args(argv)

    from seglake.meta import Meta
    from seglake.meta.alloc import decode_mark, physical_ms
    from seglake.meta.codec import encode_struct
    from seglake.meta.kv import KV

    segs = make_segments(args.segments)
    with private_etcd() as etcd:
        kv = KV(etcd.endpoint, timeout=30)
        raw = kv._client  # the raw etcd3 client (cslab-etcd3), same connection settings
        meta = Meta(kv, root="seglake")
        # the anchor writes the very same bytes, under its own root so both reads see equal data
        keys = ["raw/" + meta.segments.key(s) for s in segs]
        values = [encode_struct(s) for s in segs]
        size_mb = sum(map(len, values)) / 1e6
        print(f"{args.segments} segment records, {size_mb:.1f} MB of JSON")

        def raw_write():
            tx = raw.transactions
            for i in range(0, len(keys), 128):
                raw.transaction(compare=[], success=[tx.put(k, v) for k, v in zip(keys[i:i + 128], values[i:i + 128])],
                                failure=[])

        def raw_read():
            return raw_paged_read(raw, b"raw/seglake/segments/")

        t_raw_w, _ = timed(raw_write)
        t_sl_w, n = timed(lambda: meta.segments.save(segs))
        t_raw_r, n_raw = timed(raw_read, repeat=3)
        t_sl_r, n_sl = timed(lambda: sum(1 for _ in meta.segments.list()), repeat=3)
        assert n == n_raw == n_sl == args.segments, (n, n_raw, n_sl)
        print(f"write: raw 128-op txns {t_raw_w:.2f}s ({args.segments / t_raw_w:,.0f}/s)  "
              f"seglake save {t_sl_w:.2f}s ({args.segments / t_sl_w:,.0f}/s)")
        print(f"read:  raw paged range {t_raw_r:.2f}s  seglake list (decoded records) {t_sl_r:.2f}s")
        n_alloc = 2000
        t_get, _ = timed(lambda: [raw.get_response("seglake/alloc/tso") for _ in range(n_alloc)], repeat=3)
        meta.tso.now()  # first reservation
        t_tso, _ = timed(lambda: [meta.tso.now() for _ in range(n_alloc)], repeat=3)
        t_ids, _ = timed(lambda: [meta.ids.allocate() for _ in range(n_alloc)], repeat=3)
        print(f"alloc: raw get {t_get / n_alloc * 1e6:.0f} us  tso.now {t_tso / n_alloc * 1e6:.0f} us "
              f"({n_alloc / t_tso:,.0f}/s)  ids.allocate {t_ids / n_alloc * 1e6:.1f} us")
        t_res, _ = timed(lambda: [meta.tso.reserve(64) for _ in range(n_alloc)], repeat=3)
        mark_ms = physical_ms(decode_mark(kv.get(meta.keys.alloc_tso()).value))
        print(f"tso: reserve(64) {t_res / n_alloc * 1e6:.1f} us  mark - wall {mark_ms - time.time() * 1000:+.0f} ms "
              f"after {6 * n_alloc:,} tso calls")
        kv.close()
    verdict("meta_save_100k", t_sl_w, t_raw_w, 1.5)
    verdict("meta_read_100k", t_sl_r, t_raw_r, 1.5)
    verdict("meta_tso_now", t_tso, t_get, 1.5)
    verdict("meta_id_allocate", t_ids, t_get, 0.01)
    return 0


if __name__ == "__main__":
    sys.exit(main())
