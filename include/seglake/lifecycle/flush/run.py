"""Entry points of a flush (one pchannel inline, a Spark partition of pchannels) and
what the DAG asks before and after (backlog, readiness, the summary)."""

from __future__ import annotations

import time


from seglake import runners
from seglake.meta import keys as keymod
from seglake.wal.checkpoints import live_vchannels, read_checkpoint
from seglake.wal.log import WalLog, all_pchannels, validate_pchannel
from seglake.lifecycle.flush.flusher import Flusher


# -- entry points ---------------------------------------------------------------------------------
def flush_pchannel(meta, store, pchannel: str, settings, *, max_seconds: float | None = None,
                   flush_all: bool = False, clock=time.time, hooks: dict | None = None) -> dict:
    """Open a flusher on `pchannel` (taking its term), run it once, then finish the drops
    whose last vchannel is released (drop.finish_released); return its stats."""
    from seglake.lifecycle import drop

    f = Flusher(meta, store, pchannel, settings, clock=clock, hooks=hooks)
    stats = f.run(max_seconds=max_seconds, flush_all=flush_all).to_json()
    return {**stats, "drops_finished": drop.finish_released(meta, pchannel, clock=clock,
                                                            collection_ids=f.finish_candidates)}


def pchannels_with_log(meta) -> list[str]:
    """The pchannels that have a log record (the ones worth flushing)."""
    prefix = keymod.wal_prefix(meta.keys)
    found = set()
    for kv in meta.kv.range(prefix, keys_only=True):
        p = kv.key[len(prefix):].split("/", 1)[0]
        if p in all_pchannels() and kv.key == keymod.wal_log(meta.keys, p):
            found.add(p)
    return sorted(found)


def flush_partition(pchannels, settings_env: dict, opts: dict):
    """Executor side of the Spark engine: flush each pchannel of the partition."""
    from seglake.meta import Meta
    from seglake.storage import open_store

    settings = runners.worker_settings(settings_env)
    meta, store = Meta.from_settings(settings), open_store(settings)
    try:
        for p in pchannels:
            yield flush_pchannel(meta, store, p, settings, max_seconds=opts.get("max_seconds"),
                                 flush_all=bool(opts.get("flush_all")))
    finally:
        meta.close()


# -- DAG helpers --------------------------------------------------------------------------------
def backlog(meta, pchannel: str) -> dict:
    """How much of the log lies above the pchannel's minimum checkpoint (estimate: the
    log's average fragment size times the fragments at or above it)."""
    st = WalLog(meta, None, pchannel).state()
    count = max(0, st.last - st.first + 1 - len([h for h in st.holes if h >= st.first]))
    starts = []
    for v in live_vchannels(meta, pchannel):
        cp, _ = read_checkpoint(meta, v)
        starts.append(0 if cp is None else cp.message_id.fragment)
    low = max(min(starts) if starts else st.last + 1, st.first)
    above = max(0, st.last - low + 1)
    return {"pchannel": pchannel, "fragments": above,
            "bytes": 0 if not count else int(st.bytes * above / count), "last_time_tick": st.last_tt}


def flush_ready(meta, pchannel: str, settings, started_at: float, now: float | None = None) -> tuple[bool, str]:
    """Whether the pchannel's flush may start: not paused, and the scanner startup delay
    has passed since `started_at` (unix seconds). Returns (ready, why)."""
    from seglake.wal.log import pause_state

    validate_pchannel(pchannel)
    now = time.time() if now is None else now
    paused = pause_state(meta, pchannel)
    if paused is not None:
        scope = "global" if paused["key"].endswith("/_pause") else "pchannel"
        return False, f"{pchannel}: consumption paused ({scope}, reason {paused.get('reason') or '-'})"
    wait = started_at + settings.wal_scanner_startup_delay - now
    if wait > 0:
        return False, f"{pchannel}: startup delay, {wait:.1f} s left"
    return True, f"{pchannel}: ready"


def format_summary(results: list[dict]) -> str:
    lines = [f"wal_flush: {len(results)} pchannel(s), {sum(r['segments'] for r in results)} segments, "
             f"{sum(r['rows'] for r in results)} rows, {sum(r['bytes'] for r in results)} bytes, "
             f"{sum(r['delta_logs'] for r in results)} delta logs"]
    for r in results:
        lines.append(f"  {r['pchannel']} (term {r['term']}, {r['stopped']}): {r['segments']} segments, "
                     f"{r['rows']} rows, skipped {r['skipped']}, seals {r['seals']}")
        for v, cp in r["checkpoints"].items():
            lines.append(f"    {v}: checkpoint {cp['message_id']} lag {cp['lag_ms']} ms")
    return "\n".join(lines)
