"""bench/copy_big.py: one big file through the store's checked copy (what a restore task
and an export run per file), against `cp` + `sync -f` of the same file, in one run.

The copy runs in a child process so its peak RSS (ru_maxrss) is the copy's alone: a
copy must stream, never hold the file (target 128 MB for a 1 GiB file), at no more than
1.2x `cp` + `sync` (the copy's own durability: the deferred fsync of durable_batch).

    python bench/copy_big.py [--mib 1024] [--repeat 3]

Prints
    BENCH copy_1g_rss_mb ratio=<peak MB / 128> target=1.00 ok|miss
    BENCH export_1g_rss_mb ratio=<peak MB of an export of the file / 128> target=1.00 ok|miss
    BENCH copy_1g_time ratio=<copy / (cp + sync)> target=1.20 ok|miss
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_tmpdir, verdict  # noqa: E402

EXPORT_CHILD = r"""
import resource, sys, time
from seglake.lifecycle.backup import bundle
from seglake.storage.local import LocalStore
src, dst = LocalStore(sys.argv[1]), LocalStore(sys.argv[2])
t = time.perf_counter()
sha, n = bundle.sha256_of(src, "src/big")                    # an export: hash, then a checked streamed copy
with dst.durable_batch():
    bundle.copy_verified(src, "src/big", dst, "data/" + sha[:2] + "/" + sha, sha, n)
el = time.perf_counter() - t
print(el, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, n)
"""
CHILD = r"""
import resource, sys, time
from seglake.storage.local import LocalStore
st = LocalStore(sys.argv[1])
t = time.perf_counter()
with st.durable_batch():
    info, crc = st.copy_checked("src/big", sys.argv[2])
el = time.perf_counter() - t
print(el, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, info.size)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with bench_tmpdir("copy") as d:
        src = Path(d) / "src" / "big"
        src.parent.mkdir()
        with open(src, "wb") as f:
            for _ in range(args.mib):
                f.write(os.urandom(1 << 20))
            f.flush()
            os.fsync(f.fileno())
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).resolve().parents[1] / "include"), os.environ.get("PYTHONPATH", "")]))
        # a baseline child that imports the same modules and copies nothing: its RSS is the interpreter's
        base = subprocess.run([sys.executable, "-c", "import resource, seglake.storage.local; "
                               "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"],
                              env=env, capture_output=True, text=True, check=True)
        base_mb = float(base.stdout)
        copies, rss, cps = [], [], []
        for i in range(args.repeat):
            out = subprocess.run([sys.executable, "-c", CHILD, d, f"dst/big{i}"], env=env, capture_output=True,
                                 text=True, check=True)
            el, peak, size = out.stdout.split()
            assert int(size) == args.mib << 20
            copies.append(float(el))
            rss.append(float(peak))
            os.unlink(Path(d) / f"dst/big{i}")
            t = time.perf_counter()
            subprocess.run(["cp", str(src), str(Path(d) / f"cp{i}")], check=True)
            subprocess.run(["sync", "-f", str(Path(d) / f"cp{i}")], check=True)
            cps.append(time.perf_counter() - t)
            os.unlink(Path(d) / f"cp{i}")
        out = subprocess.run([sys.executable, "-c", EXPORT_CHILD, d, str(Path(d) / "target")], env=env,
                             capture_output=True, text=True, check=True)
        export_s, export_peak, size = out.stdout.split()
        assert int(size) == args.mib << 20
        print(f"{args.mib} MiB exported to another store (hash + checked streamed copy): {float(export_s):.2f} s, "
              f"peak RSS {float(export_peak):.0f} MB")
        copy_s, cp_s, peak = statistics.median(copies), statistics.median(cps), max(rss)
        print(f"{args.mib} MiB: checked copy {copy_s:.2f} s (peak RSS {peak:.0f} MB; the interpreter alone "
              f"{base_mb:.0f} MB); cp + sync {cp_s:.2f} s  [medians of {args.repeat}]")
        verdict("copy_1g_rss_mb", peak, 128.0, 1.00)
        verdict("export_1g_rss_mb", float(export_peak), 128.0, 1.00)
        verdict("copy_1g_time", copy_s, cp_s, 1.20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
