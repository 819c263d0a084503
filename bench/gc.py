"""bench/gc.py: GC on a local store of 200,000 files across 50 collections, 10% orphans
(half old, half young), some files referenced only by snapshots. Anchors measured in the
same run: `find -printf '%p %T@ %s\\n'` over the tree (listing) and `rm` of as many files
as the sweep deletes (delete). Then mark (inline, and Spark with start-up reported
separately) and sweep. The bench checks that no referenced file was deleted.

    python bench/gc.py [--files 200000] [--no-spark]

Targets: inline mark <= 3.0x find; sweep per file <= rm per file; zero referenced files
deleted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark" / "jobs"))
from common import bench_tmpdir, private_etcd, verdict  # noqa: E402

FILES_PER_SEGMENT = 10
OLD = time.time() - 3 * 86400


def build(meta, store, total: int, collections: int = 50):
    """Segments (10 tiny files each) in `collections` collections, 10% orphans."""
    from seglake.dev import demo
    from seglake.lifecycle import snapshot
    from seglake.meta.segments import FLUSHED, Binlog, IndexFile, Segment
    from seglake.storage import layout

    root = Path(store.uri)
    referenced_files = int(total * 0.9)
    per_coll = referenced_files // collections // FILES_PER_SEGMENT
    orphans_old, orphans_young = [], []
    snap_only = set()
    for ci in range(collections):
        coll = meta.catalog.create(f"c{ci}", demo.demo_schema(4))
        part = coll.partitions[0].partition_id
        segs = []
        for _ in range(per_coll):
            sid, logs, build_id = meta.ids.allocate(), meta.ids.allocate(8), meta.ids.allocate()
            segs.append(Segment(
                segment_id=sid, collection_id=coll.collection_id, partition_id=part, channel=coll.vchannels[0],
                state=FLUSHED, num_rows=10,
                binlogs={f: (Binlog(logs + 2 * k, 16, 10), Binlog(logs + 2 * k + 1, 16, 10))
                         for k, f in enumerate((100, 101, 102))},
                deltalogs=(Binlog(logs + 6, 16, 1),), statslogs={100: (Binlog(logs + 7, 16, 10),)},
                index_files=(IndexFile(build_id, 1, "a", 16), IndexFile(build_id, 1, "b", 16))))
        for s in segs:
            for f in layout.segment_files(s):
                p = root / f.key
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(b"0123456789abcdef")
                os.utime(p, (OLD, OLD))
        meta.segments.save(segs)
        if ci % 10 == 0:  # a snapshot, then some records go: their files live on in the snapshot only
            snapshot.create(meta, store, coll.name, "snap")
            gone = segs[: len(segs) // 10]
            meta.segments.delete(s.ref for s in gone)
            snap_only |= {f.key for s in gone for f in layout.segment_files(s)}
        n_orphans = (total - referenced_files) // collections
        for i in range(n_orphans):
            key = layout.insert_log(coll.collection_id, part, 9_000_000 + i // 10, 100, i)
            p = root / key
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(b"orphan")
            if i % 2 == 0:
                os.utime(p, (OLD, OLD))
                orphans_old.append(key)
            else:
                orphans_young.append(key)
    return orphans_old, orphans_young, snap_only


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=200_000)
    ap.add_argument("--no-spark", action="store_true")
    args = ap.parse_args(argv)

    from seglake.config import Settings
    from seglake.lifecycle import gc
    from seglake.meta import Meta
    from seglake.meta.kv import KV
    from seglake.storage.local import LocalStore

    with private_etcd() as etcd, bench_tmpdir("gc") as d:
        meta = Meta(KV(etcd.endpoint, timeout=30), root="seglake")
        store = LocalStore(Path(d) / "store")
        settings = Settings.from_dict({"etcd_endpoint": etcd.endpoint, "store_uri": store.uri})
        t = time.perf_counter()
        old, young, snap_only = build(meta, store, args.files)
        referenced = gc.load_references(meta, store).files
        n_listed = sum(1 for _ in store.list(""))
        print(f"built {n_listed} files ({len(old)} old + {len(young)} young orphans, {len(snap_only)} referenced "
              f"only by snapshots) in {time.perf_counter() - t:.1f}s")

        def find():
            subprocess.run(["find", store.uri, "-type", "f", "-printf", "%p %T@ %s\n"], check=True,
                           stdout=subprocess.DEVNULL)
        find()  # warm the dentry cache for both sides
        times = []
        for _ in range(3):
            t = time.perf_counter()
            find()
            times.append(time.perf_counter() - t)
        t_find = sorted(times)[1]

        opts = gc.GCOptions.from_settings(settings)
        times = []
        for i in range(3):
            t = time.perf_counter()
            m = gc.mark(meta, store, opts, run_id=f"bench-inline-{i}")
            times.append(time.perf_counter() - t)
        t_mark = sorted(times)[1]
        assert {c["path"] for c in m.candidates} == set(old), "mark found something other than the old orphans"
        t = time.perf_counter()
        gc.mark(meta, store, gc.GCOptions.from_settings(settings, list_threads=1), run_id="bench-serial")
        t_serial = time.perf_counter() - t
        print(f"anchor find -printf {t_find:.2f}s; inline mark (references + listing + anti-join + report) "
              f"{t_mark:.2f}s with {opts.list_threads} listing threads, {t_serial:.2f}s with one")

        if not args.no_spark:
            os.environ.update(settings.to_env())
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            os.environ["PYSPARK_PYTHON"] = sys.executable
            import gc_scan
            from pyspark.sql import SparkSession
            t = time.perf_counter()
            spark = (SparkSession.builder.master("local[2]").appName("bench-gc")
                     .config("spark.ui.enabled", "false").getOrCreate())
            t_start = time.perf_counter() - t
            t = time.perf_counter()
            ms = gc_scan.spark_mark(spark, meta, store, opts, "bench-spark", settings.to_env())
            assert ms.counts.candidates == len(old)
            t_spark = time.perf_counter() - t
            spark.stop()
            assert {c["path"] for c in gc.read_report(store, "bench-spark")} == set(old)
            print(f"spark mark {t_spark:.2f}s (+ session start-up {t_start:.2f}s)")

        # delete anchor: rm of as many files, laid out like the orphans
        rm_root = Path(d) / "rm"
        for i, key in enumerate(old):
            p = rm_root / key
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(b"orphan")
        os.sync()
        t = time.perf_counter()
        subprocess.run(["rm", "-rf", str(rm_root)], check=True)
        t_rm = time.perf_counter() - t
        os.sync()
        t = time.perf_counter()
        s = gc.sweep(meta, store, m.run_id)
        t_sweep = time.perf_counter() - t
        left = {o.key for o in store.list("")}
        lost = referenced - left
        print(f"anchor rm of {len(old)} files {t_rm:.2f}s ({t_rm / len(old) * 1e6:.0f} us/file); sweep deleted "
              f"{s.deleted} in {t_sweep:.2f}s ({t_sweep / max(1, s.deleted) * 1e6:.0f} us/file, "
              f"{len(old) // 1000 + 1} reference refreshes); referenced files deleted: {len(lost)}")
        assert s.deleted == len(old) and all(k in left for k in young)
        meta.close()
    verdict("gc_mark_inline_200k", t_mark, t_find, 3.0)
    verdict("gc_sweep_per_file", t_sweep / max(1, s.deleted), t_rm / len(old), 1.0)
    print(f"BENCH gc_referenced_deleted ratio={len(lost):.2f} target=0.00 {'ok' if not lost else 'miss'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
