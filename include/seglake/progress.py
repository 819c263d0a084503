"""Progress lines for long copies: what an operator reads in the task log while a copy
job runs (inline task or Spark driver), instead of nothing.

    copy job 7: 3/10 segments, 120/400 files, 1.2 MiB/4.0 MiB (30.0%), 2.3 MiB/s, ETA 12 s

`ProgressLog` turns counters into such a line at most once per `interval` (injectable
clock, so a test drives it without sleeping). The rate counts only what THIS run copied
(a resumed job starts from its earlier progress, which is not this run's speed), over the
last RATE_WINDOW_S (issue 27: the run's average kept a stall looking like progress); the
ETA is the bytes left at that rate; bytes that have not moved for STALL_AFTER_S print
"stalled for N s" instead; no count is ever printed lower than before. Every number
printed is finite: no rate or ETA is shown until something was copied.

`watch_copy_job` runs a ProgressLog in a daemon thread that reads the job's progress
from etcd (`copyjob.progress`, written by the copy runners) every `interval` seconds,
and logs a final line when the copy ends. Read-only; a failed read is logged and the
next poll tries again: progress lines never fail a copy. `watch_replay` does the same for
the replay of a restore to a time (lifecycle/pitr: its progress in etcd).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping

log = logging.getLogger("seglake.progress")

DEFAULT_INTERVAL_S = 5.0
RATE_WINDOW_S = 10.0     # the rate shown is over this recent window, not the whole run
STALL_AFTER_S = 30.0     # bytes unchanged this long: "stalled for N s" instead of a rate and an ETA
UNITS = ("segments", "files", "bytes")


def human_bytes(n: float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def utc_time(seconds: float | None) -> str:
    """Unix seconds as a readable UTC time ('2026-11-24 02:39:01 UTC'); '-' for none."""
    import time as _time

    if not seconds:
        return "-"
    return _time.strftime("%Y-%m-%d %H:%M:%S UTC", _time.gmtime(float(seconds)))


def tick_time(tick: int | None) -> str:
    """A hybrid timestamp (time tick, TSO) as the UTC time its physical part means."""
    from seglake.meta.alloc import ts_seconds

    return utc_time(ts_seconds(int(tick))) if tick else "-"


def human_seconds(s: float) -> str:
    s = int(round(s))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class ProgressLog:
    """Formats and emits progress lines; `update(done)` emits at most once per interval."""

    def __init__(self, label: str, totals: Mapping[str, int], *, interval: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, emit: Callable[[str], None] | None = None,
                 start: Mapping[str, int] | None = None) -> None:
        if not (isinstance(interval, (int, float)) and math.isfinite(interval) and interval > 0):
            raise ValueError(f"progress interval must be a positive finite number, got {interval!r}")
        self.label = label
        self.totals = {k: max(0, int(totals.get(k, 0))) for k in UNITS}
        self.interval = float(interval)
        self.clock = clock
        self.emit = emit or _print
        self.started = clock()
        self.base_bytes = int((start or {}).get("bytes", 0))
        self.last_emit: float | None = None
        self.lines: list[str] = []
        self.shown = {k: int((start or {}).get(k, 0)) for k in UNITS}   # never shown lower (a resume)
        self.samples: deque = deque([(self.started, self.base_bytes)])   # (time, bytes): the recent window
        self.moved_at = self.started

    def line(self, done: Mapping[str, int], now: float | None = None) -> str:
        """Counts (never lower than a line before: a resumed attempt recounts what it finds
        in the target), percent, the rate over the last RATE_WINDOW_S and the ETA at it --
        or "stalled for N s" once the bytes have not moved for STALL_AFTER_S."""
        now = self.clock() if now is None else now
        for k in UNITS:
            value = int(done.get(k, 0))
            if k == "bytes" and value > self.shown[k]:
                self.moved_at = now
            self.shown[k] = max(self.shown[k], value)
        parts = [f"{self.shown[k]}/{self.totals[k]} {k}" for k in ("segments", "files")]
        copied, total = self.shown["bytes"], self.totals["bytes"]
        pct = f" ({100.0 * min(copied, total) / total:.1f}%)" if total > 0 else ""
        parts.append(f"{human_bytes(copied)}/{human_bytes(total)}{pct}")
        self.samples.append((now, copied))
        while len(self.samples) > 2 and self.samples[1][0] <= now - RATE_WINDOW_S:
            self.samples.popleft()
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        if copied < total and now - self.moved_at >= STALL_AFTER_S:
            parts.append(f"stalled for {human_seconds(now - self.moved_at)}")
        elif t1 > t0 and b1 > b0:
            rate = (b1 - b0) / (t1 - t0)
            parts.append(f"{human_bytes(rate)}/s")
            if copied < total:
                parts.append(f"ETA {human_seconds((total - copied) / rate)}")
        return f"{self.label}: " + ", ".join(parts)

    def update(self, done: Mapping[str, int], *, final: bool = False) -> str | None:
        """Emit a line if `interval` passed since the last one (always when `final`)."""
        now = self.clock()
        due = now - (self.started if self.last_emit is None else self.last_emit) >= self.interval
        if not (due or final):
            return None
        self.last_emit = now
        text = self.line(done, now) + (" (done)" if final else "")
        self.lines.append(text)
        self.emit(text)
        return text


def _print(text: str) -> None:
    print(text, flush=True)  # task logs and spark-submit's stdout both capture it


def _job_done(meta, job_id: int) -> dict:
    from seglake.lifecycle import copyjob

    p = copyjob.progress(meta, job_id)
    return {"segments": p["copied_segments"], "files": p["done_files"], "bytes": p["done_bytes"]}


@contextmanager
def watch_copy_job(meta, job_id: int, *, interval: float = DEFAULT_INTERVAL_S,
                   emit: Callable[[str], None] | None = None) -> Iterator[ProgressLog]:
    """Log the job's progress from etcd every `interval` seconds while the body runs,
    then one final line. `meta` is used from the watcher thread only while the body
    runs and once after it (the final read)."""
    job, _ = meta.copyjobs.get(job_id)
    progress = ProgressLog(f"copy job {job_id}", {"segments": job.total_segments, "files": job.total_files,
                                                  "bytes": job.total_bytes},
                           interval=interval, emit=emit, start=_job_done(meta, job_id))
    with _polling(interval, f"copy job {job_id}", f"seglake-progress-{job_id}",
                  lambda final: progress.update(_job_done(meta, job_id), final=final)):
        yield progress


@contextmanager
def _polling(interval: float, what: str, thread_name: str, tick: Callable[[bool], object]) -> Iterator[None]:
    """tick(False) every `interval` seconds on a daemon thread while the body runs, then
    tick(True) once after it. A failed tick is logged and tried again at the next one:
    progress lines never fail the work they watch."""
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(interval):
            try:
                tick(False)
            except Exception as e:  # noqa: BLE001 - a progress line never fails the work
                log.warning("%s: progress not readable: %s: %s", what, type(e).__name__, e)

    thread = threading.Thread(target=poll, name=thread_name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=interval + 30)
        try:
            tick(True)
        except Exception as e:  # noqa: BLE001
            log.warning("%s: final progress not readable: %s: %s", what, type(e).__name__, e)


def replay_line(p: Mapping) -> str:
    """One line of a replay's progress (lifecycle.pitr.progress)."""
    pct = f" ({p['percent']:.1f}%)" if p.get("percent") is not None else ""
    now = (f", now {p['vchannel']}" + (f" at {human_bytes(p['rate_bps'])}/s" if p.get("rate_bps") else "")
           if p.get("vchannel") else "")
    return (f"replay into {p['target']}: {p['vchannels_done']}/{p['vchannels']} vchannels done, "
            f"{p['messages']} log messages, {human_bytes(p['bytes'])}/{human_bytes(p['bytes_total'])} of log"
            f"{pct}{now}")


@contextmanager
def watch_replay(meta, target_id: int, *, interval: float = DEFAULT_INTERVAL_S,
                 emit: Callable[[str], None] | None = None) -> Iterator[list[str]]:
    """A replay_line every `interval` seconds while the body runs (when it changed), then
    one final line; yields the lines emitted. Read-only; a failed read is logged."""
    from seglake.lifecycle.pitr.replaying import progress as read

    emit = emit or _print
    lines: list[str] = []

    def say(final: bool) -> None:
        text = replay_line(read(meta, target_id)) + (" (done)" if final else "")
        if final or not lines or text != lines[-1]:
            lines.append(text)
            emit(text)

    with _polling(interval, f"replay into {target_id}", f"seglake-replay-progress-{target_id}", say):
        yield lines
