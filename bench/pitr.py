"""bench/pitr.py: a restore to a time whose instant needs the log replayed, against the
flusher flushing the same rows, in one run (issue 30).

Ingest --rows rows (int64 pk, a --dim float32 vector, one float scalar; batches of
--batch) through WalClient into a collection with a point-in-time window, then:
- the flusher flushes the pchannel inline (the anchor: the same log read, the same
  Parquet files written, the same etcd commits);
- a restore of the collection as of the end of the ingest (no snapshot before it: the
  whole log is replayed) into a new collection: plan, an empty copy job, the replay,
  the target made usable. Its visible row count is checked.

    python bench/pitr.py [--rows 1000000] [--batch 10000] [--dim 128] [--repeat 3]

Prints both times and
    BENCH pitr_replay_1M ratio=<restore to a time / flush> target=1.50 ok|miss
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_row_args, bench_tmpdir, private_etcd, vector_schema, verdict  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_row_args(ap)
    args = ap.parse_args(argv)
    if min(args.rows, args.batch, args.dim, args.repeat) < 1:
        ap.error("every count must be >= 1")

    from seglake.config import Settings
    from seglake.lifecycle import copyjob, pitr
    from seglake.lifecycle.flush import flush_pchannel
    from seglake.meta import Meta
    from seglake.storage.local import LocalStore
    from seglake.visibility import visible_count
    from seglake.wal.client import WalClient, synthetic_rows

    with private_etcd() as etcd, bench_tmpdir("pitr") as d:
        flushes, replays = [], []
        for r in range(args.repeat):
            settings = Settings.from_dict({"etcd_endpoint": etcd.endpoint, "etcd_root": f"bench{r}",
                                           "store_uri": str(Path(d) / f"store{r}"),
                                           "flush_seal_rows": max(args.rows, 1), "flush_seal_bytes": 1 << 40})
            meta, store = Meta.from_settings(settings), LocalStore(Path(d) / f"store{r}")
            with WalClient(meta, store, settings, batch_rows=args.batch) as client:
                coll = client.create_collection("bench", vector_schema(args.dim), shards=1)
                pitr.set_window(meta, "bench", "1d")
                client.insert("bench", synthetic_rows(coll, args.rows, 1))
            as_of = meta.tso.now()
            p = coll.vchannels[0].rsplit("_", 1)[0]
            t = time.perf_counter()
            st = flush_pchannel(meta, store, p, settings, flush_all=True)
            flushes.append(time.perf_counter() - t)
            assert st["rows"] == args.rows, st
            t = time.perf_counter()
            job = pitr.restore_as_of(meta, store, "bench", "bench_t", as_of)
            copyjob.plan(meta, job)
            copyjob.run_inline(meta, store, job)
            copyjob.finalize(meta, job)
            out = pitr.replay(meta, store, settings, meta.catalog.get_by_name("bench_t").collection_id)
            replays.append(time.perf_counter() - t)
            assert out["rows_replayed"] == args.rows, out
            assert visible_count(meta, store, out["target_id"]) == args.rows
            mb = out["log_bytes"] / 1e6
            meta.close()
        t_replay, t_flush = statistics.median(replays), statistics.median(flushes)
        print(f"{args.rows} rows, {mb:.1f} MB of WAL fragments")
        print(f"restore to a time (whole log replayed): {t_replay:.2f} s ({args.rows / t_replay:,.0f} rows/s); "
              f"flusher on the same log {t_flush:.2f} s ({args.rows / t_flush:,.0f} rows/s)  [medians of "
              f"{args.repeat}: replay {', '.join(f'{x:.2f}' for x in replays)}; flush "
              f"{', '.join(f'{x:.2f}' for x in flushes)}]")
        verdict("pitr_replay_1M", t_replay, t_flush, 1.50)
    return 0


if __name__ == "__main__":
    sys.exit(main())
