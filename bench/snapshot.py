"""bench/snapshot.py: snapshot create of a collection with 100,000 segment records
(metadata only, realistic file lists), end to end through the engine (no Airflow),
against the physical anchor measured in the same run: the raw paged etcd read of those
records plus a raw fastavro write of the same manifest entries (same grouping, same codec).

Also: snapshot create of a demo collection through the Spark path (write_manifests job
code in a local Spark session), Spark start-up reported separately.

    python bench/snapshot.py [--segments 100000] [--no-spark]

Target: create within 2.0x of the anchor.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark" / "jobs"))
from common import private_etcd, raw_paged_read, timed, verdict  # noqa: E402
from meta import make_segments  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--segments", type=int, default=100_000)
    ap.add_argument("--no-spark", action="store_true")
    args = ap.parse_args(argv)

    import fastavro

    from seglake import manifest
    from seglake.dev import demo
    from seglake.lifecycle import snapshot
    from seglake.meta import Meta
    from seglake.meta.kv import KV
    from seglake.storage.local import LocalStore

    with private_etcd() as etcd, tempfile.TemporaryDirectory(prefix="seglake-bench-store-") as d:
        meta = Meta(KV(etcd.endpoint, timeout=30), root="seglake")
        store = LocalStore(d)
        coll = meta.catalog.create("big", demo.demo_schema(128), partitions=["_default", "p1", "p2", "p3"])
        segs = [s.replace(collection_id=coll.collection_id, partition_id=coll.partitions[i % 4].partition_id)
                for i, s in enumerate(make_segments(args.segments))]
        meta.segments.save(segs)
        print(f"{args.segments} segment records saved")

        # anchor 1: the raw paged read of the same records
        raw = meta.kv._client
        prefix = meta.keys.segments_prefix(coll.collection_id).encode()

        def raw_read():
            return raw_paged_read(raw, prefix)

        # anchor 2: a raw fastavro write of the same entries, same grouping and codec
        entries = [manifest.segment_entry(s) for s in segs]
        per = snapshot.SEGMENTS_PER_MANIFEST
        schema = manifest.parsed_schema()

        def raw_avro():
            out = Path(d) / "raw-avro"
            out.mkdir(exist_ok=True)
            for n, i in enumerate(range(0, len(entries), per)):
                buf = io.BytesIO()
                fastavro.writer(buf, schema, entries[i:i + per], codec="deflate")
                (out / f"{n}.avro").write_bytes(buf.getvalue())

        t_read, n = timed(raw_read, repeat=3)
        t_avro, _ = timed(raw_avro, repeat=3)
        assert n == args.segments
        counter = iter(range(100))

        def create():
            return snapshot.create(meta, store, "big", f"bench_{next(counter)}")

        t_create, rec = timed(create, repeat=3)
        assert rec.state == "COMMITTED" and rec.segments == args.segments
        anchor = t_read + t_avro
        print(f"anchor: raw paged read {t_read:.2f}s + raw fastavro write {t_avro:.2f}s = {anchor:.2f}s")
        print(f"seglake snapshot create (capture, {rec.manifests} manifests, metadata, commit): {t_create:.2f}s")
        lines = [verdict("snapshot_create_100k", t_create, anchor, 2.0)]

        if not args.no_spark:
            demo.seed(meta, store, demo.SeedParams(name="demo", partitions=2, segments=8, rows=1000, dim=32))
            import os
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            os.environ["PYSPARK_PYTHON"] = sys.executable
            os.environ.update(meta_env(etcd.endpoint, d))
            t0 = time.perf_counter()
            from pyspark.sql import SparkSession
            spark = (SparkSession.builder.master("local[2]").appName("bench-snapshot")
                     .config("spark.ui.enabled", "false").getOrCreate())
            spark.sparkContext.parallelize([1]).count()
            t_start = time.perf_counter() - t0
            import write_manifests
            rec = snapshot.begin(meta, "demo", "spark_bench")
            t1 = time.perf_counter()
            rec = write_manifests.run(spark, meta, store, rec.collection_id, rec.name, per)
            t_job = time.perf_counter() - t1
            spark.stop()
            print(f"demo snapshot through the Spark path: Spark start-up {t_start:.2f}s, "
                  f"create {t_job:.2f}s ({rec.segments} segments, {rec.state})")
        meta.close()
    return 0 if all(line.endswith("ok") for line in lines) else 0


def meta_env(endpoint: str, store_dir: str) -> dict:
    from seglake.config import Settings
    return Settings.from_dict({"etcd_endpoint": endpoint, "store_uri": store_dir}).to_env()


if __name__ == "__main__":
    sys.exit(main())
