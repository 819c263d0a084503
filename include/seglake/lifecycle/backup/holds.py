"""Holds: a reader (an import, a verify) keeps a bundle from being pruned while it reads
it, and the retention prune's side of that protocol. Records live in the backup target
itself (`_locks/holds/...`, `_locks/pruning/...`, layout builds the keys), each an
{"at": unix seconds, ...} JSON renewed by a KeepAlive; one older than HOLD_TTL is a dead
process's and is ignored.

Whose clock says "older": the record's `at` is its writer's clock, the judge's is another
host's. A record is dead only when it is older than its TTL by BOTH the judge's clock and
the target's own (the object's mtime, which the store stamps at every rewrite, against a
probe object's: store_clock), so a judging host whose clock jumped ahead, or runs ahead of
the writer's, never takes a live lock or hold for dead.
"""

from __future__ import annotations

import json
import time
from typing import Callable

from seglake.errors import NotFound
from seglake.lifecycle.backup.bundle import BundleError, check_names
from seglake.meta import codec
from seglake.storage import Store, layout
from seglake.storage.clock import store_clock

# A reader (import, verify) writes its hold, then waits while a prune intent for the bundle
# exists; a prune writes its intent, then drops the bundle only if no live hold exists, and
# removes the intent. Each writes before it reads the other's record, so at least one sees
# the other: the prune skips the bundle (reported as held), or the reader, once the intent
# is gone, finds the bundle pruned (a clear NotFound) -- never a bundle deleted under it.
HOLD_TTL = 3600.0      # a hold or intent older than this is a dead process's: ignored
PRUNE_WAIT = 600.0     # how long a reader waits for a prune of its bundle to finish


def _elapsed_clock() -> float:
    """Seconds on a clock that counts every pause of this process, also a suspend of the
    machine (CLOCK_BOOTTIME where there is one), and is never set back."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):
        return time.monotonic()


class KeepAlive:
    """Rewrites `key` ({"at": now, ...}) every ttl / 10 s until stopped; `ok_at` is the
    last successful rewrite (wall clock). `held(margin)`: no gap longer than `margin`
    seconds between two rewrites so far, nor since the last one (on the wall clock and on
    a clock that counts pauses): the record never looked dead to a reader allowing `ttl`.
    A process paused (SIGSTOP, a suspended VM) for longer wakes with `held` False, also
    when its rewriting thread ran first after the pause."""

    def __init__(self, target: Store, key: str, ttl: float, extra: dict | None = None,
                 still: Callable[[], bool] | None = None):
        """`still`: asked before each rewrite; once it says False the record is no longer
        rewritten (its owner's work ended elsewhere: a copy job finalized by another process)."""
        import threading

        self.target, self.key, self.ttl, self.extra, self.still = target, key, ttl, dict(extra or {}), still
        self.ok_at = time.time()
        self.ok_elapsed = _elapsed_clock()
        self.longest_gap = 0.0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="keepalive", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(self.ttl / 10):
            try:
                if self.still is not None and not self.still():
                    return
                now, elapsed = time.time(), _elapsed_clock()
                self.target.put(self.key, json.dumps({"at": now, **self.extra}).encode())
                self.longest_gap = max(self.longest_gap, now - self.ok_at, elapsed - self.ok_elapsed)
                self.ok_at, self.ok_elapsed = now, elapsed
            except Exception:  # noqa: BLE001 - judged by the owner through ok_at
                pass

    def held(self, margin: float) -> bool:
        gap = max(self.longest_gap, time.time() - self.ok_at, _elapsed_clock() - self.ok_elapsed)
        return gap <= margin

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


def live_record(target: Store, key: str, ttl: float, now: float | None = None) -> dict | None:
    """A lock, hold or intent record ({"at": unix seconds, ...}) younger than `ttl` by this
    host's clock (or `now`) or by the target's own (module doc); None when it is missing,
    unreadable or a dead process's."""
    try:
        raw = target.get(key)
    except NotFound:
        return None
    try:
        doc = codec.loads(raw, key)
        if (time.time() if now is None else now) - codec.moment(doc, "at", key) < ttl:
            return doc
    except ValueError:
        doc = {"by": f"an unreadable record {key} (judged by its age)"}   # damaged: its age alone judges it
    try:
        if _store_age(target, key) < ttl:       # its writer's clock and ours disagree, or it is dead
            return doc
    except NotFound:
        pass
    return None


def _store_age(target: Store, key: str) -> float:
    """How old `key` is by the target's own clock; infinite when the target cannot be written
    (read-only credentials: then only this host's clock judges; every judge that deletes has
    written its own record first, so it always gets the target's)."""
    try:
        now = store_clock(target)
    except Exception:  # noqa: BLE001 - a read-only target
        return float("inf")
    return now - target.head(key).mtime


def live_records(target: Store, prefix: str, ttl: float, now: float | None = None) -> list[dict]:
    """live_record of every key under `prefix`."""
    return [d for o in target.list(prefix) if (d := live_record(target, o.key, ttl, now)) is not None]


def holders(target: Store, db: str, collection: str, bundle: str) -> list[str]:
    """The live holds on a bundle: who holds it. A hold that cannot be read (a symlink,
    an unreadable directory, which a plain listing skips) holds: a prune never drops a
    bundle on a partial view of its holds (attack s22)."""
    from seglake.storage.base import SYMLINK, UNREADABLE

    out = []
    for o in target.list(layout.bundle_holds_prefix(db, collection, bundle), report_unreadable=True):
        if o.size in (UNREADABLE, SYMLINK):
            out.append(f"{o.key} (a hold that cannot be read)")
        elif (d := live_record(target, o.key, HOLD_TTL)) is not None:
            out.append(str(d.get("by") or "a reader"))
    return out


class held:
    """`with held(target, db, collection, bundle, by=...):` -- the retention prune leaves
    the bundle while the block runs (read the bundle inside the block). A target the
    hold cannot be written to (read-only credentials) is read without one, with a warning."""

    def __init__(self, target: Store, db: str, collection: str, bundle: str, *, by: str = "",
                 say: Callable[[str], None] | None = None, wait: float = PRUNE_WAIT):
        check_names(db, collection, bundle)
        self.target, self.where, self.by, self.say, self.wait = target, (db, collection, bundle), by, say, wait
        self.key: str | None = None
        self.beat: KeepAlive | None = None

    def __enter__(self):
        import uuid

        db, collection, bundle = self.where
        self.key = hold(self.target, db, collection, bundle, uuid.uuid4().hex[:16], by=self.by, say=self.say,
                        wait=self.wait)
        if self.key is not None:
            self.beat = KeepAlive(self.target, self.key, HOLD_TTL, {"by": self.by})
        return self

    def __exit__(self, *exc) -> None:
        if self.beat is not None:
            self.beat.stop()
            self.beat = None
        if self.key is not None:
            release(self.target, self.key)
            self.key = None


def hold(target: Store, db: str, collection: str, bundle: str, token: str, *, by: str = "",
         say: Callable[[str], None] | None = None, wait: float = PRUNE_WAIT) -> str | None:
    """Write (or renew) the hold `token` on a bundle, then wait while a prune of it runs:
    the reader's side of the protocol (module doc). Returns the hold's key, None when the
    target cannot be written to (read-only credentials: read unheld, with a warning).
    A hold lives HOLD_TTL unless renewed (KeepAlive); `release` ends it."""
    check_names(db, collection, bundle)
    key = layout.bundle_hold(db, collection, bundle, token)
    try:
        target.put(key, json.dumps({"at": time.time(), "by": by}).encode())
    except Exception as e:  # noqa: BLE001 - a read-only target: read it unheld
        if say:
            say(f"could not hold bundle {db}.{collection}/{bundle} in {target.uri} ({type(e).__name__}; "
                f"read-only credentials?): a retention prune of the target could drop it meanwhile")
        return None
    deadline = time.time() + wait
    while live_record(target, layout.bundle_pruning(db, collection, bundle), HOLD_TTL) is not None:
        if time.time() > deadline:
            release(target, key)
            raise BundleError(f"bundle {db}.{collection}/{bundle}: a retention prune of it has been running for "
                              f"over {wait:g} s; try again once it ends")
        time.sleep(0.2)
    return key


def wait_for_prune(target: Store, db: str, collection: str, bundle: str, wait: float = PRUNE_WAIT) -> None:
    """Wait while a prune of the bundle runs (its intent is live): the side of a holder
    whose record is written elsewhere (a pin in etcd) -- written first, then this, then
    the bundle looked for (it may have been pruned meanwhile)."""
    deadline = time.time() + wait
    while live_record(target, layout.bundle_pruning(db, collection, bundle), HOLD_TTL) is not None:
        if time.time() > deadline:
            raise BundleError(f"bundle {db}.{collection}/{bundle}: a retention prune of it has been running for "
                              f"over {wait:g} s; try again once it ends")
        time.sleep(0.2)


def release(target: Store, key: str) -> None:
    """End a hold (best effort: one left behind expires after HOLD_TTL)."""
    try:
        target.delete_many([key])
    except Exception:  # noqa: BLE001 - expires after HOLD_TTL
        pass


def drop_unless_held(target: Store, db: str, collection: str, bundle: str,
                     also: Callable[[], list[str]] | None = None) -> list[str]:
    """The prune's side of the protocol: write the intent, drop the bundle (marker first,
    then bundle.json) only if nobody holds it, remove the intent. Returns the holders
    (empty: dropped). `also()`: more holders kept elsewhere (a Milvus capture's pins in
    etcd), asked after the intent is written, as the holds are: a pin written before that
    is seen; one written after it sees the intent (wait_for_prune)."""
    intent = layout.bundle_pruning(db, collection, bundle)
    target.put(intent, json.dumps({"at": time.time()}).encode())
    try:
        who = holders(target, db, collection, bundle) + (list(also()) if also is not None else [])
        if not who:
            target.delete_many([layout.bundle_commit(db, collection, bundle)])   # the bundle ends here
            target.delete_many([layout.bundle_doc(db, collection, bundle)])
        return who
    finally:
        target.delete_many([intent])
