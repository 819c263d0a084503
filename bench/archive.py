"""bench/archive.py: how far the WAL archive (continuous backup) runs behind a steady ingest.

A producer appends rows through WalClient at a steady --mb-per-second (default 10 MB/s of
Arrow IPC) for --seconds, into a collection whose retention policy says archive; a
continuous archive run (lifecycle/backup/archive.run, polling every 0.2 s) ships the
fragments to a backup target directory on the same disk; a sampler reads the archive's
status (seglake wal status) every 0.25 s: the age of the oldest fragment not shipped is the
archive's recovery point at that moment.

Physical anchors measured in the same run: the ingest rate the producer reached, and a raw
copy (read + write + fsync) of the same fragment files into another directory.

    python bench/archive.py [--seconds 20] [--mb-per-second 10]

Ends with
    BENCH archive_lag_s ratio=<p95 lag / seal interval> target=1.00 ok|miss
(the seal interval: config flush_seal_idle, the soonest a growing segment is sealed), and
prints the lag in seconds (p50 / p95 / max).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_tmpdir, fsync_path, private_etcd, vector_schema, verdict, write_synced  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--mb-per-second", type=float, default=10.0)
    ap.add_argument("--dim", type=int, default=128)
    args = ap.parse_args(argv)
    if not (0 < args.seconds <= 3600 and 0 < args.mb_per_second <= 1000 and 1 <= args.dim <= 4096):
        ap.error("--seconds in (0, 3600], --mb-per-second in (0, 1000], --dim in [1, 4096]")

    from seglake.config import Settings
    from seglake.lifecycle import retention
    from seglake.lifecycle.backup import archive
    from seglake.meta import Meta
    from seglake.storage.local import LocalStore
    from seglake.wal.client import WalClient, synthetic_rows
    from seglake.wal.log import WalLog

    with private_etcd() as etcd, bench_tmpdir("archive") as d:
        settings = Settings.from_dict({"etcd_endpoint": etcd.endpoint, "etcd_root": "bench",
                                       "store_uri": str(Path(d) / "store")})
        meta, store, target = Meta.from_settings(settings), LocalStore(Path(d) / "store"), LocalStore(Path(d) / "bk")
        client = WalClient(meta, store, settings)
        coll = client.create_collection("bench", vector_schema(args.dim), shards=2)
        retention.set_policy(meta, "bench", {"keep_last": 1, "archive": True})
        batch = synthetic_rows(coll, max(1, int(1e6 / (4 * args.dim + 16))), 1)      # ~1 MB a call
        per_call = batch.nbytes / 1e6
        calls_per_s = args.mb_per_second / per_call
        stop, lags, produced = threading.Event(), [], [0.0]

        def produce():
            t0, i = time.monotonic(), 0
            while time.monotonic() - t0 < args.seconds:
                client.insert("bench", batch)
                i += 1
                produced[0] += per_call
                wait = t0 + i / calls_per_s - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            produced.append(time.monotonic() - t0)

        def sample():
            while not stop.is_set():
                st = archive.status(meta)
                lags.append(max((s["lag_s"] for s in st), default=0.0))
                time.sleep(0.25)

        shipper = threading.Thread(target=archive.run, args=(meta, store, target),
                                   kwargs={"seconds": args.seconds + 10, "poll": 0.2}, daemon=True)
        sampler = threading.Thread(target=sample, daemon=True)
        shipper.start()
        sampler.start()
        produce()
        t_end = time.monotonic()
        while any(s["behind"] for s in archive.status(meta)) and time.monotonic() - t_end < 60:
            time.sleep(0.1)
        catch_up = time.monotonic() - t_end
        stop.set()
        sampler.join()
        shipper.join(args.seconds + 30)
        site = archive.site_id(meta)
        frags = []
        for p in archive.archived_pchannels(meta):
            last = WalLog(meta, store, p).state().last
            assert archive.ArchivedLog(target, site, p).numbers() == list(range(1, last + 1)), p
            frags += [rec.key for rec in WalLog(meta, store, p).fragments()]
        mb_done, t_prod = produced[0], produced[1]
        # anchor: a raw copy of the same fragment files (read, write, fsync)
        raw = Path(d) / "raw"
        raw.mkdir()
        t = time.perf_counter()
        nbytes = 0
        for i, k in enumerate(frags):
            data = store.get(k)
            nbytes += len(data)
            write_synced(raw / f"{i:08d}", data)
        fsync_path(raw)
        t_raw = time.perf_counter() - t
        lags.sort()
        p50, p95, mx = statistics.median(lags), lags[int(0.95 * (len(lags) - 1))], lags[-1]
        seal = settings.flush_seal_idle
        print(f"ingest {mb_done:.0f} MB in {t_prod:.1f} s ({mb_done / t_prod:.1f} MB/s, asked {args.mb_per_second:g}); "
              f"{len(frags)} fragments, {nbytes / 1e6:.0f} MB; raw copy of them {t_raw:.2f} s "
              f"({nbytes / 1e6 / t_raw:.0f} MB/s)")
        print(f"archive lag over {len(lags)} samples: p50 {p50:.2f} s, p95 {p95:.2f} s, max {mx:.2f} s; "
              f"caught up {catch_up:.2f} s after the ingest stopped; seal interval (flush_seal_idle) {seal:g} s")
        verdict("archive_lag_s", p95, seal, 1.00)
        client.close()
        meta.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
