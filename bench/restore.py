"""bench/restore.py: restore through a copy-segment job on the local store, two shapes:
20,000 files of 64 KiB and 20 files of 64 MiB, on two filesystems: tmpfs (/dev/shm),
where no disk noise hides the software's own overhead, and the disk (/work), where this
VM's run-to-run swings are ~5x. Anchors measured in the same run on the same source
tree: `cp -r` and a single-thread `shutil.copyfile` loop, and on the disk also the
durable anchor `cp -r` + `sync -f` (the local store fsyncs every file and directory
before a copy returns, so the restore is durable and plain `cp -r` is not). Then the
restore job Pending -> Completed through the engine (no Airflow) with the inline engine
and with the Spark engine (local[2], session start-up included; its copy phase also
alone).

    python bench/restore.py [--small-files 20000] [--big-files 20] [--no-spark] [--fs tmpfs,disk]

Targets on tmpfs: inline <= 1.0x cp -r on both shapes; Spark <= 2.0x cp -r on the
20,000-file shape, and its copy phase alone <= 1.25x the shutil loop. On the disk the
same targets against the durable anchor (cp -r + sync -f; the loop likewise + sync -f).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark" / "jobs"))
from common import bench_disk_dir, private_etcd, verdict  # noqa: E402

FILES_PER_SEGMENT = 10


def build_source(meta, store, name: str, n_files: int, size: int):
    """A collection whose segments reference n_files files of `size` random bytes."""
    from seglake.dev import demo
    from seglake.lifecycle import snapshot
    from seglake.meta.segments import FLUSHED, Binlog, IndexFile, Segment
    from seglake.storage import layout

    coll = meta.catalog.create(name, demo.demo_schema(8), partitions=["_default", "p1"])
    blob = os.urandom(size)
    segs = []
    for i in range(max(1, n_files // FILES_PER_SEGMENT)):
        part = coll.partitions[i % 2].partition_id
        sid, logs, build = meta.ids.allocate(), meta.ids.allocate(8), meta.ids.allocate()
        seg = Segment(segment_id=sid, collection_id=coll.collection_id, partition_id=part, channel=coll.vchannels[0],
                      state=FLUSHED, num_rows=1000,
                      binlogs={f: (Binlog(logs + 2 * k, size, 1000), Binlog(logs + 2 * k + 1, size, 1000))
                               for k, f in enumerate((100, 101, 102))},
                      deltalogs=(Binlog(logs + 6, size, 10),), statslogs={100: (Binlog(logs + 7, size, 1000),)},
                      index_files=(IndexFile(build, 1, "centroids", size), IndexFile(build, 1, "meta", size)))
        for f in layout.segment_files(seg):
            path = Path(store.uri) / f.key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(blob)
        segs.append(seg)
    meta.segments.save(segs)
    snapshot.create(meta, store, name, "snap")
    return coll, segs


def drop_target(meta, store, target: str):
    from seglake.dev import demo
    coll = meta.catalog.get_by_name(target)
    demo.purge_collection(meta, store, coll)


FILESYSTEMS = {"tmpfs": "/dev/shm", "disk": bench_disk_dir()}


def sync_fs(path) -> None:
    """syncfs(2) on the filesystem holding `path`: what makes a plain copy durable."""
    subprocess.run(["sync", "-f", str(path)], check=True)


def timed_clean(fn, cleanup, runs: int = 3):
    """Median of `runs`; each run starts with no dirty pages and an empty destination
    (this VM's disk swings a lot between runs)."""
    out = []
    for i in range(runs):
        os.sync()
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
        cleanup(i)
    return sorted(out)[len(out) // 2], out


def fmt(xs) -> str:
    return str([round(x, 2) for x in xs])


def bench_fs(fs: str, base: str, etcd, meta, args, spark_state: dict) -> bool:
    from seglake.config import Settings
    from seglake.lifecycle import copyjob, restore
    from seglake.storage import layout
    from seglake.storage.local import LocalStore

    durable = fs != "tmpfs"  # tmpfs: fsync is free and nothing survives a power cut anyway
    ok = True
    with tempfile.TemporaryDirectory(prefix="seglake-bench-restore-", dir=base) as d:
        for shape, n, size in (("20k_x_64KiB", args.small_files, 64 << 10), ("20_x_64MiB", args.big_files, 64 << 20)):
            store = LocalStore(Path(d) / f"store_{shape}")  # holds exactly the source tree
            settings = Settings.from_dict({"etcd_endpoint": etcd.endpoint, "store_uri": store.uri})
            coll, segs = build_source(meta, store, f"src_{fs[:2]}_{shape[:3].rstrip('_')}", n, size)
            files = [Path(store.uri) / f.key for s in segs for f in layout.segment_files(s)]
            total = len(files) * size
            print(f"\n{fs} ({base}) {shape}: {len(files)} files, {total / 2**20:.0f} MiB")
            dest = Path(d) / "cp"

            def cp_r():
                subprocess.run(["cp", "-r", store.uri, str(dest)], check=True)
                if durable:
                    sync_fs(dest)

            def loop():
                made = set()
                for f in files:
                    out = dest / f.relative_to(store.uri)
                    if out.parent not in made:
                        out.parent.mkdir(parents=True, exist_ok=True)
                        made.add(out.parent)
                    shutil.copyfile(f, out)
                if durable:
                    sync_fs(dest)

            def inline(i):
                job_id = restore.restore(meta, store, coll.name, "snap", f"inl_{fs[:2]}_{shape[:2]}_{i}")
                copyjob.plan(meta, job_id, settings.max_segments_per_task)
                copyjob.run_inline(meta, store, job_id, threads=1, settings=settings)
                job = copyjob.finalize(meta, job_id)
                assert job.state == "Completed", job

            sync = " + sync -f" if durable else ""
            t_cp, all_cp = timed_clean(lambda i: cp_r(), lambda i: shutil.rmtree(dest))
            t_loop, all_loop = timed_clean(lambda i: loop(), lambda i: shutil.rmtree(dest))
            print(f"anchors (median of 3): cp -r{sync} {t_cp:.2f}s {fmt(all_cp)}, "
                  f"shutil.copyfile loop{sync} {t_loop:.2f}s {fmt(all_loop)}")
            if durable:  # what durability costs physically, same run, same tree
                def cp_plain():
                    subprocess.run(["cp", "-r", store.uri, str(dest)], check=True)
                t_plain, all_plain = timed_clean(lambda i: cp_plain(), lambda i: shutil.rmtree(dest))
                print(f"plain cp -r (not durable) {t_plain:.2f}s {fmt(all_plain)}: "
                      f"sync -f adds {t_cp - t_plain:+.2f}s")
            t_inline, all_inline = timed_clean(
                inline, lambda i: drop_target(meta, store, f"inl_{fs[:2]}_{shape[:2]}_{i}"))
            print(f"inline restore (restore, plan, copy, finalize; every file fsynced), median of 3: "
                  f"{t_inline:.2f}s {fmt(all_inline)}")
            if durable:
                print(f"inline restore vs plain cp -r: {t_inline / t_plain:.2f}x")
            ok &= verdict(f"restore_inline_{shape}_{fs}", t_inline, t_cp, 1.0).endswith("ok")

            if not args.no_spark and shape.startswith("20k"):
                ok &= bench_spark(fs, shape, meta, store, coll, settings, t_cp, t_loop, spark_state)
            drop_target(meta, store, coll.name)
    return ok


def bench_spark(fs, shape, meta, store, coll, settings, t_cp, t_loop, spark_state) -> bool:
    """A fresh session per filesystem (start-up counted, as a DAG run pays it)."""
    from seglake.lifecycle import copyjob, restore

    os.environ.update(settings.to_env())
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import copy_segments
    from pyspark.sql import SparkSession

    if spark_state.get("spark") is not None:
        spark_state.pop("spark").stop()
    os.sync()
    t = time.perf_counter()
    spark = spark_state["spark"] = (SparkSession.builder.master("local[2]").appName("bench-restore")
                                    .config("spark.ui.enabled", "false").getOrCreate())
    t_start = time.perf_counter() - t
    target = f"spk_{fs[:2]}_20"
    job_id = restore.restore(meta, store, coll.name, "snap", target)
    copyjob.plan(meta, job_id, settings.max_segments_per_task)
    t_copy0 = time.perf_counter()
    copy_segments.run(spark, meta, job_id)
    t_copy = time.perf_counter() - t_copy0
    job = copyjob.finalize(meta, job_id)
    t_spark = time.perf_counter() - t
    assert job.state == "Completed", job
    print(f"spark restore: {t_spark:.2f}s total (session start-up {t_start:.2f}s, copy phase {t_copy:.2f}s)")
    drop_target(meta, store, target)
    ok = verdict(f"restore_spark_{shape}_{fs}", t_spark, t_cp, 2.0).endswith("ok")
    return ok & verdict(f"restore_spark_copy_phase_{shape}_{fs}", t_copy, t_loop, 1.25).endswith("ok")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small-files", type=int, default=20_000)
    ap.add_argument("--big-files", type=int, default=20)
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--fs", default="tmpfs,disk", help="comma-separated: tmpfs (/dev/shm), disk (/work)")
    args = ap.parse_args(argv)
    chosen = [f.strip() for f in args.fs.split(",") if f.strip()]
    unknown = [f for f in chosen if f not in FILESYSTEMS]
    if unknown or not chosen:
        ap.error(f"--fs takes {', '.join(FILESYSTEMS)}; got {args.fs!r}")

    from seglake.meta import Meta
    from seglake.meta.kv import KV

    ok, spark_state = True, {}
    with private_etcd() as etcd:
        meta = Meta(KV(etcd.endpoint, timeout=30), root="seglake")
        try:
            for fs in chosen:
                ok &= bench_fs(fs, FILESYSTEMS[fs], etcd, meta, args, spark_state)
        finally:
            if spark_state.get("spark") is not None:
                spark_state["spark"].stop()
            meta.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
