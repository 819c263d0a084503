"""The fault suite's harness (conftest.py re-exports its fixtures): real servers a test
can kill, freeze and restart on the same port and data dir, engine steps in child
processes a test can SIGKILL at a chosen progress, and the checks every case ends with.

- `etcd` / `fsettings` / `fmeta` / `fstore`: a private etcd per test (function scope),
  with `.kill()` (SIGKILL), `.pause()` / `.resume()` (SIGSTOP / SIGCONT) and
  `.restart()` on the same ports and data dir; settings with a short etcd timeout.
- `weed` / `s3_fault_settings`: a private SeaweedFS per test with `.restart()`.
- `spawn(step, args, settings, faults=...)`: run a step of `steps.py` in a child
  process (its own process group, dies with the test process); `kill_when(child,
  progress, at)` SIGKILLs its group once `progress()` reaches `at`.
- `assert_nothing_referenced_lost(meta, store)`: every file referenced by a live
  segment record or by a COMMITTED snapshot (its manifests, metadata and the segment
  files it captured) exists with its recorded size and row count.
- `assert_nothing_committed_twice(meta, store)`: no segment id appears twice in etcd,
  no source segment is restored twice into one target, no snapshot lists a segment
  twice or holds a different count than its record, no copy job maps a segment twice.
- `assert_restored(meta, store, job_id, snap)`: the job Completed with the snapshot's
  rows, the target verifies, holds exactly its files, each equal to its source.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import seglake
from seglake.dev.devstack import EtcdServer, WeedServer, pid_alive

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "dags"))  # dag_helpers: the fault cases run DAGs too
from engine_fixtures import engine_fixtures  # noqa: E402

STEPS = HERE / "steps.py"
INCLUDE = str(Path(seglake.__file__).resolve().parents[1])  # the seglake this test imports
ROWS_SMALL = dict(partitions=2, segments=5, rows=200, dim=8)  # 10 segments, 90 files (fields 0, 1 + 3, delta, stats, 2 index)


# -- servers that can be killed and restarted ------------------------------------------------
class _Restartable:
    """SIGKILL / SIGSTOP / SIGCONT and restart on the same ports and data dir (a devstack
    Server keeps both across start/stop)."""

    paused = False

    def kill(self) -> None:
        if self.proc is not None:
            self.resume()
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.proc = None
        self.pid_file.unlink(missing_ok=True)

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused and self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def restart(self, timeout: float = 60) -> None:
        self.resume()
        if self.proc is not None:
            self.stop(timeout=15)
        self.start(timeout=timeout)

    def shutdown(self) -> None:
        self.resume()
        self.stop(timeout=5)  # then SIGKILL: a restarted weed can be slow to honour SIGTERM


@dataclass
class KillableEtcd(_Restartable, EtcdServer):
    pass


@dataclass
class KillableWeed(_Restartable, WeedServer):
    pass


@pytest.fixture
def etcd(tmp_path):
    server = KillableEtcd(state_dir=tmp_path / "etcd").start(timeout=30)
    yield server
    server.shutdown()


@pytest.fixture
def fsettings(etcd, tmp_path):
    """Settings on the private etcd: short request timeout, few retries, so an outage
    longer than a couple of seconds surfaces as an error instead of a long hang."""
    from seglake.config import Settings

    return Settings.from_dict({"etcd_endpoint": etcd.endpoint, "etcd_root": "faults",
                               "store_uri": str(tmp_path / "store"), "etcd_timeout": 2, "etcd_retries": 3})


fmeta, fstore = engine_fixtures("fsettings", "fmeta", "fstore")


@pytest.fixture
def weed(tmp_path):
    server = KillableWeed(state_dir=tmp_path / "weed").start(timeout=60)
    yield server
    server.shutdown()


@pytest.fixture
def s3_fault_settings(weed, etcd_server, root_prefix):
    """Metadata on the session etcd, files on this test's own SeaweedFS."""
    from seglake.config import Settings
    from seglake.storage import open_store

    s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": root_prefix,
                            "store_uri": f"s3://faults/{root_prefix}", "s3_endpoint": weed.endpoint,
                            "s3_access_key": weed.access_key, "s3_secret_key": weed.secret_key,
                            "etcd_timeout": 5})
    open_store(s).ensure_bucket()
    return s


class LostReplyProxy:
    """A TCP proxy in front of etcd that can lose one answer: after `arm()`, the next
    request (one holding given bytes, or any of >= 100 bytes) is forwarded (etcd applies it) but every byte etcd sends back for `hold`
    seconds is dropped and then the connection is reset -- the client sees UNAVAILABLE
    for a write that did happen (etcd's "request timed out" / "leader changed")."""

    def __init__(self, target_port: int, hold: float = 0.4):
        import socket
        import threading

        self.target_port, self.hold = target_port, hold
        self.state = "off"  # off -> armed -> dropping -> off
        self.patterns: tuple[bytes, ...] = ()
        self.cuts = 0
        self._conns: list = []
        self._lock = threading.Lock()
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.port = self._srv.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def arm(self, *patterns: bytes) -> None:
        """Lose the answer to the next request that holds every one of `patterns` (gRPC
        does not compress: keys and JSON values travel as plain bytes)."""
        self.patterns = patterns
        self.state = "armed"

    def _accept(self) -> None:
        import socket
        import threading

        while not self._stop:
            try:
                client, _ = self._srv.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._conns.append((client, server))
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src, dst, upstream: bool) -> None:
        import threading

        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream and self.state == "armed" and self._matches(data):
                    self.state = "dropping"
                    threading.Timer(self.hold, self._cut).start()
                if not upstream and self.state == "dropping":
                    continue  # the answer is lost
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.close()
                except OSError:
                    pass

    def _matches(self, data: bytes) -> bool:
        if self.patterns:
            return all(p in data for p in self.patterns)
        return len(data) >= 100  # a request, not an HTTP/2 ping or window update

    def _cut(self, count: bool = True) -> None:
        import socket
        import struct

        with self._lock:
            conns, self._conns = self._conns, []
        for pair in conns:
            for sock in pair:
                try:  # linger 0: the close resets; SHUT_RD wakes the pump blocked in recv
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    sock.shutdown(socket.SHUT_RD)
                except OSError:
                    pass
        self.cuts += count
        self.state = "off"

    def close(self) -> None:
        self._stop = True
        self._srv.close()
        self._cut(count=False)


# -- child processes -------------------------------------------------------------------------


# A child is started through this trampoline instead of a preexec_fn: a preexec_fn makes
# Python fork() (not vfork) the test process, whose gRPC threads (the etcd client) then
# run their at-fork handlers in the child before exec -- which now and then aborted it
# (SIGABRT, "epoll_wait error: Bad file descriptor"). The trampoline sets its own death
# signal (kept across exec), checks the parent did not die first, and execs the command.
_TRAMPOLINE = ("import ctypes, os, signal, sys\n"
               "ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGKILL)\n"
               "if os.getppid() != int(sys.argv[1]):\n"
               "    sys.exit(137)\n"
               "os.execvp(sys.argv[2], sys.argv[2:])\n")


def _tied(cmd: list[str]) -> list[str]:
    """`cmd` run so that it is SIGKILLed when this test process dies."""
    return [sys.executable, "-c", _TRAMPOLINE, str(os.getpid()), *cmd]


def child_env(settings, faults: str = "", extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGLAKE_") or k == "SEGLAKE_HOME"}
    env.update(settings.to_env())
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [INCLUDE, env.get("PYTHONPATH", "")]))
    if faults:
        env["SEGLAKE_FAULTS"] = faults
    env.update(extra or {})
    return env


@dataclass
class Child:
    """A child process in its own process group; its output goes to files."""

    proc: subprocess.Popen
    out: Path
    err: Path
    descendants: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, group: bool = True) -> None:
        """SIGKILL the whole process group (what a pod or task kill does), or with
        group=False the driver alone (its worker processes live on as orphans)."""
        self.descendants |= descendants(self.pid)
        try:
            if group:
                os.killpg(self.pid, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def wait(self, timeout: float = 120) -> "Outcome":
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"child step still running after {timeout}s:\n{self.err.read_text()[-3000:]}")
        return Outcome(rc, self.out.read_text(), self.err.read_text())

    def reap(self) -> None:
        """Stop anything this child started that is still alive (by pid)."""
        if self.alive():
            self.kill()
        for pid in self.descendants:
            if pid_alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@dataclass
class Outcome:
    rc: int
    out: str
    err: str

    @property
    def result(self) -> dict:
        return json.loads(self.out.strip().splitlines()[-1])

    def assert_ok_or_clear_error(self, *words: str) -> bool:
        """True if the step completed; False if it failed with a clear engine error
        (exit 3, a SeglakeError whose message contains one of `words`). A crash with a
        raw traceback, or an error that names none of `words`, fails the test."""
        print(f"child step: rc {self.rc}; {self.err.strip().splitlines()[-1] if self.err.strip() else ''}")
        if self.rc == 0:
            return True
        assert self.rc == 3, f"the step crashed instead of failing clearly (rc {self.rc}):\n{self.err[-3000:]}"
        last = self.err.strip().splitlines()[-1]
        assert last.startswith("SeglakeError"), self.err[-3000:]
        assert not words or any(w.lower() in last.lower() for w in words), \
            f"error does not say what failed ({words}): {last}"
        return False


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        for c in parents.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


@pytest.fixture
def spawn(tmp_path):
    """spawn(step, args, settings, faults="", extra_env=None) -> Child; reaped at teardown."""
    children: list[Child] = []

    def start(step: str, args: dict, settings, faults: str = "", extra_env: dict | None = None,
              argv: list[str] | None = None) -> Child:
        n = len(children)
        out, err = tmp_path / f"child{n}.out", tmp_path / f"child{n}.err"
        cmd = argv or [sys.executable, str(STEPS), step, json.dumps(args)]
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen(_tied(cmd), env=child_env(settings, faults, extra_env), stdout=o, stderr=e,
                                    stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(tmp_path))
        child = Child(proc, out, err)
        children.append(child)
        return child

    yield start
    for c in children:
        c.reap()


def kill_when(child: Child, progress, at: float, timeout: float = 90, group: bool = True,
              poll: float = 0.01) -> float:
    """SIGKILL the child once progress() >= at; returns the progress seen at the kill.
    Fails if the child ends first (the kill point was never reached)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        p = progress()
        if p >= at:
            child.kill(group=group)
            return p
        if not child.alive():
            pytest.fail(f"the step ended (rc {child.proc.returncode}) before reaching {at:.0%} "
                        f"(at {p:.0%}):\n{child.err.read_text()[-3000:]}")
        time.sleep(poll)
    child.kill()
    pytest.fail(f"the step did not reach {at:.0%} in {timeout}s")


def wait_until(cond, timeout: float = 60, poll: float = 0.01, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(poll)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


# -- data and progress -----------------------------------------------------------------------
def seed_and_snapshot(meta, store, name: str = "demo", snap: str = "s1", **params):
    """A small collection (10 segments, 90 files by default) and a COMMITTED snapshot."""
    from seglake.dev import demo
    from seglake.lifecycle import snapshot

    coll, _ = demo.seed(meta, store, demo.SeedParams(name=name, **{**ROWS_SMALL, **params}))
    rec = snapshot.create(meta, store, name, snap) if snap else None
    return coll, rec


def target_keys(meta, store, coll_id: int) -> list[str]:
    """Every object under a collection's log prefixes and its segments' index dirs."""
    from seglake.storage import layout

    keys = [o.key for p in layout.collection_prefixes(coll_id) for o in store.list(p)]
    for s in meta.segments.list(coll_id):
        for d in {layout.index_dir(f.build_id, f.version, s.partition_id, s.segment_id) for f in s.index_files}:
            keys += [o.key for o in store.list(d)]
    return sorted(set(keys))


def copy_progress(meta, store, target: str, total_files: int):
    """progress() for kill_when: the fraction of a restore's files present in the target."""
    from seglake.errors import NotFound

    state = {"cid": None}

    def progress() -> float:
        if state["cid"] is None:
            try:
                state["cid"] = meta.catalog.get_by_name(target).collection_id
            except NotFound:
                return 0.0
        return len(target_keys(meta, store, state["cid"])) / total_files

    return progress


def job_for(meta, target: str):
    jobs = [j for j in meta.copyjobs.list() if j.target_collection == target]
    assert len(jobs) == 1, f"expected one copy job into {target!r}, found {[j.job_id for j in jobs]}"
    return jobs[0]


def fingerprint(meta, store, root: str | None = None) -> tuple:
    """Every etcd key and value under the root (no trailing '/': a root with a newline
    appended is inside it too) and every object with its size: a side-effect detector."""
    root = meta.keys.root if root is None else root
    kvs = tuple((kv.key, kv.value) for kv in meta.kv.range(root))
    objs = tuple(sorted((o.key, o.size) for o in store.list("")))
    return kvs, objs


# -- invariants ------------------------------------------------------------------------------
def referenced_checks(meta, store) -> list[dict]:
    """One verify check per file referenced by a visible segment record or a COMMITTED
    snapshot (its metadata, its manifests and every file of every segment it captured)."""
    from seglake.lifecycle import snapshot
    from seglake.meta.segments import DROPPED, IMPORTING
    from seglake.meta.snapshots import COMMITTED
    from seglake.storage import layout

    checks: dict[str, dict] = {}

    def add_segment(seg, origin):
        for f in layout.segment_files(seg):
            checks[f.key] = {"segment_id": seg.segment_id, "key": f.key, "kind": f.kind, "size": f.size,
                             "entries": f.entries if f.kind in ("insert", "delta") else None, "origin": origin}

    for seg in meta.segments.list():
        if seg.state not in (DROPPED, IMPORTING):  # Importing: a copy plan, not yet visible
            add_segment(seg, "segment record")
    for rec in meta.snapshots.list():
        if rec.state != COMMITTED:
            continue
        doc = snapshot.read_metadata(store, rec)  # raises if the metadata is gone
        for m in doc["manifests"]:
            checks[m["key"]] = {"segment_id": -1, "key": m["key"], "kind": "manifest", "size": m["size"],
                                "entries": None, "origin": f"snapshot {rec.name}"}
        for seg in snapshot.read_segments(store, rec):
            add_segment(seg, f"snapshot {rec.name}")
    return list(checks.values())


def assert_nothing_referenced_lost(meta, store) -> int:
    from seglake.lifecycle import verify

    checks = referenced_checks(meta, store)
    problems = verify.check_files(store, checks, threads=4)
    assert not problems, f"{len(problems)} referenced files lost or changed: {problems[:5]}"
    return len(checks)


def assert_nothing_committed_twice(meta, store) -> None:
    from seglake.lifecycle import snapshot
    from seglake.meta.segments import DROPPED
    from seglake.meta.snapshots import COMMITTED

    segs = list(meta.segments.list())
    dup = [i for i, n in Counter(s.segment_id for s in segs).items() if n > 1]
    assert not dup, f"segment ids recorded twice: {dup[:10]}"
    by_target = Counter((s.collection_id, s.source["collection_id"], s.source["segment_id"])
                        for s in segs if s.source and s.state != DROPPED)
    twice = [k for k, n in by_target.items() if n > 1]
    assert not twice, f"source segments restored twice into one target: {twice[:10]}"
    for rec in meta.snapshots.list():
        if rec.state != COMMITTED:
            continue
        ids = [s.segment_id for s in snapshot.read_segments(store, rec)]
        assert len(ids) == len(set(ids)) == rec.segments, \
            f"snapshot {rec.name!r}: {len(ids)} manifest entries, {len(set(ids))} distinct, record says {rec.segments}"
    for job in meta.copyjobs.list():
        targets = [m.target_segment for t in meta.copyjobs.tasks(job.job_id) for m in t.mappings]
        assert len(targets) == len(set(targets)), f"copy job {job.job_id} maps a segment twice"
        assert [t.task_id for t in meta.copyjobs.tasks(job.job_id)] == list(range(len(meta.copyjobs.tasks(job.job_id))))


def _sha(store, key: str) -> str:
    return hashlib.sha256(store.get(key)).hexdigest()


def assert_restored(meta, store, job_id: int, snap) -> None:
    """Completed with the snapshot's rows; the target verifies; it holds exactly its
    files, each byte-equal to its source; the snapshot is no longer pinned."""
    from seglake.lifecycle import verify
    from seglake.meta.segments import FLUSHED
    from seglake.storage import layout

    job, _ = meta.copyjobs.get(job_id)
    assert job.state == "Completed", f"copy job {job_id} is {job.state}: {job.reason}"
    assert job.total_rows == snap.rows, (job.total_rows, snap.rows)
    report = verify.verify_collection(meta, store, job.target_collection)
    assert report["ok"], verify.format_report(report)
    assert (report["rows"], report["segments_checked"]) == (snap.rows, snap.segments)
    segs = list(meta.segments.list(job.target_collection_id))
    assert all(s.state == FLUSHED for s in segs) and len(segs) == snap.segments
    expected = sorted(f.key for s in segs for f in layout.segment_files(s))
    assert target_keys(meta, store, job.target_collection_id) == expected, "leftover or missing target files"
    for s in segs:
        src = s.source
        pairs = zip(layout.segment_files(s, collection_id=src["collection_id"], partition_id=src["partition_id"],
                                         segment_id=src["segment_id"]), layout.segment_files(s), strict=True)
        for a, b in pairs:
            assert _sha(store, a.key) == _sha(store, b.key), f"{b.key} differs from its source {a.key}"
    assert job.job_id not in meta.snapshots.get(job.source_collection_id, job.snapshot)[0].pins


def assert_invariants(meta, store) -> None:
    assert_nothing_referenced_lost(meta, store)
    assert_nothing_committed_twice(meta, store)


def price_rows(meta, store, name: str, read=("price",)) -> list[tuple]:
    """The visible rows of collection `name` as sorted (pk, price, Timestamp): what the fault
    tests compare before and after a fault. `read`: the columns read (the others' files are
    then read too, and a damaged one fails the read)."""
    from seglake.visibility import visible_rows

    t = visible_rows(meta, store, meta.catalog.get_by_name(name).collection_id, columns=list(read))
    return sorted(zip(t.column("pk").to_pylist(), t.column("price").to_pylist(), t.column("Timestamp").to_pylist()))


OUTAGE_S = 3.0  # longer than the 2 s etcd timeout and the client's retries


def outage(etcd, mode: str, seconds: float = OUTAGE_S) -> None:
    """Take etcd away for `seconds` (mode "kill": killed then restarted; "stop": SIGSTOP
    then SIGCONT), then bring the same member back."""
    if mode == "kill":
        etcd.kill()
        time.sleep(seconds)
        etcd.restart()
    else:
        etcd.pause()
        time.sleep(seconds)
        etcd.resume()
