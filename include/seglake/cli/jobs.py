"""Copy-job commands."""

from __future__ import annotations


from seglake.config import Settings
from seglake.cli.output import EXIT_FAILED, emit, fail, open_meta_store
from seglake.progress import human_bytes


def _bar(fraction: float, width: int = 30) -> str:
    n = int(round(fraction * width))
    return "[" + "#" * n + "." * (width - n) + f"] {fraction * 100:5.1f}%"


def _source(j: dict) -> str:
    """Where a job copies from: a snapshot, a bundle of the backup target, or nothing (a
    restore to a time of a collection born inside its window starts empty)."""
    if j.get("bundle"):
        return f"bundle {j['bundle']['collection']}/{j['bundle']['bundle']}"
    return f"{j['source_collection']}/{j['snapshot']}" if j["snapshot"] else \
        f"{j['source_collection']} (from its creation)"


def _job_row(j: dict) -> dict:
    p = j["progress"]
    return {"job": j["job_id"], "state": j["state"], "source": _source(j),
            "target": j["target_collection"], "segments": f"{p['copied_segments']}/{p['total_segments']}",
            "size": human_bytes(j["total_bytes"]), "duration": f"{j['duration_s']:.1f}s",
            "reason": j["reason"] or None}


def cmd_jobs_list(args, s: Settings) -> int:
    from seglake.lifecycle import copyjob

    meta, _ = open_meta_store(s)
    jobs = copyjob.list_jobs(meta, args.collection)
    emit(args, jobs, [_job_row(j) for j in jobs],
         ["job", "state", "source", "target", "segments", "size", "duration", "reason"])
    return 0


def cmd_jobs_describe(args, s: Settings) -> int:
    import time

    from seglake.lifecycle import copyjob

    meta, _ = open_meta_store(s)
    while True:
        j = copyjob.describe_job(meta, args.job_id)
        p = j["progress"]
        if args.json:
            emit(args, j)
        else:
            print(f"copy job {j['job_id']}: {j['state']}  {j['source_collection']}/{j['snapshot']} -> "
                  f"{j['target_collection']}")
            print(f"  {_bar(j['fraction'])}  segments {p['copied_segments']}/{p['total_segments']}, "
                  f"files {p['done_files']}/{p['total_files']}, "   # done: never lower after a resume
                  f"{human_bytes(p['done_bytes'])}/{human_bytes(p['total_bytes'])}")
            print(f"  tasks {p['tasks_completed']}/{p['tasks']} completed, {p['tasks_failed']} failed; "
                  f"duration {j['duration_s']:.1f}s; rows {j['total_rows']}"
                  + (f"; reason: {j['reason']}" if j["reason"] else ""))
        if j["state"] == "Failed":
            return fail(args.prog, f"copy job {j['job_id']} Failed: {j['reason']}", EXIT_FAILED, s)
        if not args.watch or j["state"] == "Completed":
            return 0
        time.sleep(args.interval)


def cmd_jobs_limit(args, s: Settings) -> int:
    """Show the store-wide copy limit, or set it (a flag left out keeps its value)."""
    from seglake import throttle

    meta, _ = open_meta_store(s)
    bps, rps = throttle.store_limit(meta)
    if args.max_mib_per_second is not None or args.max_requests_per_second is not None:
        bps = bps if args.max_mib_per_second is None else args.max_mib_per_second * (1 << 20)
        rps = rps if args.max_requests_per_second is None else args.max_requests_per_second
        bps, rps = throttle.set_store_limit(meta, bps, rps)
    emit(args, {"max_bytes_per_second": bps, "max_requests_per_second": rps},
         text=(f"store copy limit: {throttle.human_rate(bps, 'B/s')}, {throttle.human_rate(rps, 'req/s')} "
               f"(shared by all copy jobs, exports and imports that start from now on)"))
    return 0
