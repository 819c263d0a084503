"""The scale-out profile on one machine, loopback only: a 3-member etcd cluster, a
SeaweedFS S3 server and a Spark standalone master with 2 workers, under one base
directory (default `.dev/cluster`). `seglake cluster up|down|status|env`,
`make cluster-up` / `cluster-down` / `demo-cluster`, and the tests' session fixture.

One file on purpose (~600 lines, development tooling, not the engine): the profile's
servers and their lifetimes are one unit, started and stopped together.

Guarantees
- Every server is a devstack.Server: its own session and process group, a pid file,
  bounded waits. Started from a test (detach=False) it dies with the process that started
  it (PR_SET_PDEATHSIG + watchdog); `up(detach=True)` outlives the CLI, and `down` from any
  process stops each server by the pid in its pid file -- only after checking that the pid
  still runs in that server's own directory (a reused pid is never signalled). A Spark
  worker's executors live in the worker's process group and go with it.
- Loopback only: etcd client and peer URLs, SeaweedFS (-ip.bind), and Spark (--host and
  SPARK_LOCAL_IP, which binds the web UIs and the executors too) listen on 127.0.0.1.
- `up` with nothing running starts a fresh cluster (data of the last run wiped, new free
  ports; when a server cannot bind a port another program took after it was picked,
  everything started is stopped and `up` tries again on new ports, 3 attempts in all); `up` while everything runs is a no-op ("running"); `up` while only part of it
  runs refuses until `down`. `down` with nothing running is a no-op. A file lock
  serialises concurrent `up` / `down`.
- The profile: `state.json` (ports, token; 0600) and `env` (0600: holds the S3 secret), a
  file to source (`set -a; . .dev/cluster/env; set +a`) that switches the CLI
  (SEGLAKE_*) and Airflow's connections -- AIRFLOW_CONN_ETCD_DEFAULT with the three
  endpoints, AIRFLOW_CONN_AWS_DEFAULT to SeaweedFS, AIRFLOW_CONN_SPARK_DEFAULT to the
  master -- and the Variable (s3:// store) without editing any file. Airflow resolves
  AIRFLOW_CONN_* variables before its database.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import signal
import sys
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from seglake.dev.devstack import EtcdServer, Server, WeedServer, find_binary, free_port, pid_alive, port_open
from seglake.errors import SeglakeError

LOOPBACK = "127.0.0.1"
STATE_VERSION = 1
PORT_ATTEMPTS = 3  # `up` on fresh ports when a server could not bind one (taken meanwhile)
PORT_CLASH_MARKERS = ("address already in use", "Address already in use", "is not available on",
                      "Failed to bind", "could not bind")


class ClusterError(SeglakeError):
    """The cluster cannot be started, or is in a state `up` will not touch."""


def spark_home() -> Path:
    """The pyspark package directory: the pip package is a full Spark distribution
    (bin/spark-class) without the sbin/start-*.sh scripts."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.origin:
        raise ClusterError("pyspark is not installed (run `make setup`)")
    return Path(spec.origin).parent


def missing_prerequisites() -> list[str]:
    """Why this machine cannot start the cluster (empty: it can)."""
    out = []
    for name in ("etcd", "weed"):
        try:
            find_binary(name)
        except FileNotFoundError as e:
            out.append(str(e))
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        out.append("no Java runtime (java on PATH or JAVA_HOME) for Spark")
    try:
        if not (spark_home() / "bin" / "spark-class").exists():
            out.append("pyspark has no bin/spark-class")
    except ClusterError as e:
        out.append(str(e))
    return out


def _http_json(url: str, body: dict | None = None, timeout: float = 2.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


# -- servers ---------------------------------------------------------------------------
@dataclass
class EtcdMember(EtcdServer):
    """A member of the static cluster: launched with its peers, healthy together (etcd
    answers /health only once the members elected a leader)."""


@dataclass
class SparkDaemon(Server):
    """A Spark standalone daemon run in the foreground by bin/spark-class (which execs
    the JVM, so the pid file holds the JVM's pid)."""

    daemon_class: str = ""
    args: list = field(default_factory=list)

    def command(self) -> list[str]:
        return [str(spark_home() / "bin" / "spark-class"), self.daemon_class, "--host", LOOPBACK,
                "--port", str(self.ports["rpc"]), "--webui-port", str(self.ports["webui"]), *self.args]

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        conf = self.state_dir / "conf"  # empty: no stray spark-defaults.conf / spark-env.sh
        conf.mkdir(parents=True, exist_ok=True)
        env.update({
            "SPARK_HOME": str(spark_home()), "SPARK_CONF_DIR": str(conf), "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOG_DIR": str(self.state_dir), "SPARK_LOCAL_DIRS": str(self.state_dir / "local"),
            "SPARK_DAEMON_MEMORY": "256m", "PYSPARK_PYTHON": sys.executable,
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        })
        return env

    @property
    def webui(self) -> str:
        return f"http://{LOOPBACK}:{self.ports['webui']}"


@dataclass
class SparkMaster(SparkDaemon):
    name: str = "spark-master"
    daemon_class: str = "org.apache.spark.deploy.master.Master"

    @property
    def url(self) -> str:
        return f"spark://{LOOPBACK}:{self.ports['rpc']}"

    def state(self) -> dict:
        return _http_json(f"{self.webui}/json/")

    def healthy(self) -> bool:
        try:
            return port_open(self.ports["rpc"]) and self.state().get("status") == "ALIVE"
        except Exception:  # noqa: BLE001 - not up yet
            return False


@dataclass
class SparkWorker(SparkDaemon):
    name: str = "spark-worker"
    daemon_class: str = "org.apache.spark.deploy.worker.Worker"
    master: SparkMaster | None = None
    cores: int = 1
    memory: str = "1g"

    def command(self) -> list[str]:
        self.args = ["--cores", str(self.cores), "--memory", self.memory,
                     "--work-dir", str(self.state_dir / "work"), self.master.url]
        return super().command()

    def registered(self, master_state: dict) -> dict | None:
        """This worker's entry in the master's state, if it registered and is ALIVE."""
        for w in master_state.get("workers", []):
            if w.get("host") == LOOPBACK and w.get("port") == self.ports["rpc"] and w.get("state") == "ALIVE":
                return w
        return None

    def healthy(self) -> bool:
        try:
            return self.registered(self.master.state()) is not None
        except Exception:  # noqa: BLE001 - not up yet
            return False


# -- the cluster -----------------------------------------------------------------------
def _free_ports(n: int, taken: set[int]) -> list[int]:
    out: list[int] = []
    for _ in range(100 * n):
        p = free_port()
        if p not in taken and p + 10000 not in taken:
            taken.add(p)
            out.append(p)
            if len(out) == n:
                return out
    raise ClusterError("no free loopback ports")


def _write_private(path: Path, text: str) -> None:
    """Write a file only this user can read (0600 from creation), atomically."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@dataclass
class ClusterStack:
    base: Path
    members: int = 3
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    bucket: str = "seglake"
    prefix: str = "cluster"
    state: dict = field(default_factory=dict, repr=False)  # holds the S3 secret: never in a repr
    _servers: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        self.base = Path(self.base).resolve()

    # -- state ----------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.base / "state.json"

    @property
    def env_file(self) -> Path:
        return self.base / "env"

    def _load(self) -> bool:
        try:
            self.state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            self.state = {}
            return False
        if self.state.get("version") != STATE_VERSION:
            raise ClusterError(f"{self.state_file} is not a seglake cluster state (version "
                               f"{self.state.get('version')!r}); remove {self.base} by hand")
        self._servers = self._build(self.state)
        return True

    def _new_state(self) -> dict:
        taken: set[int] = set()
        weed = WeedServer(state_dir=self.base / "weed")  # its own low ports (gRPC = http + 10000)
        taken |= set(weed.ports.values()) | {p + 10000 for p in weed.ports.values()}
        etcd = _free_ports(2 * self.members, taken)
        spark = _free_ports(2 + 2 * self.workers, taken)
        return {
            "version": STATE_VERSION, "created": time.time(), "token": f"seglake-{uuid.uuid4().hex[:12]}",
            "etcd": [{"member": f"e{i + 1}", "client": etcd[2 * i], "peer": etcd[2 * i + 1]}
                     for i in range(self.members)],
            "weed": {"ports": weed.ports, "access_key": weed.access_key, "secret_key": weed.secret_key},
            "bucket": self.bucket, "prefix": self.prefix,
            "spark": {"master": {"rpc": spark[0], "webui": spark[1]},
                      "workers": [{"rpc": spark[2 + 2 * i], "webui": spark[3 + 2 * i],
                                   "cores": self.worker_cores, "memory": self.worker_memory}
                                  for i in range(self.workers)]},
        }

    def _build(self, st: dict) -> list[Server]:
        cluster = ",".join(f"{m['member']}=http://{LOOPBACK}:{m['peer']}" for m in st["etcd"])
        servers: list[Server] = [
            EtcdMember(state_dir=self.base / "etcd" / m["member"], name="etcd", member=m["member"],
                       ports={"client": m["client"], "peer": m["peer"]}, initial_cluster=cluster,
                       cluster_token=st["token"]) for m in st["etcd"]]
        w = st["weed"]
        servers.append(WeedServer(state_dir=self.base / "weed", ports=dict(w["ports"]),
                                  access_key=w["access_key"], secret_key=w["secret_key"]))
        master = SparkMaster(state_dir=self.base / "spark" / "master", ports=dict(st["spark"]["master"]))
        servers.append(master)
        servers += [SparkWorker(state_dir=self.base / "spark" / f"worker-{i + 1}", name="spark-worker",
                                ports={"rpc": w["rpc"], "webui": w["webui"]}, master=master,
                                cores=w["cores"], memory=w["memory"])
                    for i, w in enumerate(st["spark"]["workers"])]
        return servers

    # -- parts ----------------------------------------------------------------------
    @property
    def etcd(self) -> list[EtcdMember]:
        return [s for s in self._servers if isinstance(s, EtcdMember)]

    @property
    def weed(self) -> WeedServer:
        return next(s for s in self._servers if isinstance(s, WeedServer))

    @property
    def master(self) -> SparkMaster:
        return next(s for s in self._servers if isinstance(s, SparkMaster))

    @property
    def spark_workers(self) -> list[SparkWorker]:
        return [s for s in self._servers if isinstance(s, SparkWorker)]

    @property
    def etcd_endpoints(self) -> str:
        return ",".join(m.endpoint for m in self.etcd)

    @property
    def s3_endpoint(self) -> str:
        return self.weed.endpoint

    @property
    def spark_master_url(self) -> str:
        return self.master.url

    @property
    def store_uri(self) -> str:
        return f"s3://{self.state['bucket']}/{self.state['prefix']}"

    # -- lifecycle ------------------------------------------------------------------
    @contextmanager
    def _locked(self):
        self.base.mkdir(parents=True, exist_ok=True)
        with open(self.base / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def owned_pid(self, server: Server) -> int | None:
        """The server's pid if its pid file names a live process running in the server's
        own directory (what every devstack server is started in): a pid reused by
        another program after a crash or reboot is never ours."""
        pid = server.proc.pid if server.proc is not None and server.proc.poll() is None else server.running_pid()
        if not pid:
            return None
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            return None
        return pid if cwd == str(server.state_dir.resolve()) else None

    def up(self, detach: bool = False, timeout: float = 180.0) -> str:
        """Start the cluster; 'started', or 'running' when it already was (see module doc)."""
        with self._locked():
            if self._load():
                alive = {self._label(s): self.owned_pid(s) for s in self._servers}
                if all(alive.values()):
                    if self.healthy():
                        return "running"
                    raise ClusterError(f"the cluster in {self.base} runs but is not healthy "
                                       "(`seglake cluster status`); run `seglake cluster down` first")
                if any(alive.values()):
                    up = ", ".join(k for k, v in alive.items() if v)
                    raise ClusterError(f"the cluster in {self.base} is only partly running ({up}); "
                                       "run `seglake cluster down` first")
            missing = missing_prerequisites()
            if missing:
                raise ClusterError("cannot start the cluster: " + "; ".join(missing))
            for attempt in range(1, PORT_ATTEMPTS + 1):
                for sub in ("etcd", "weed", "spark"):  # a fresh cluster: nothing of the last run
                    shutil.rmtree(self.base / sub, ignore_errors=True)
                self.state = self._new_state()
                self._servers = self._build(self.state)
                _write_private(self.state_file, json.dumps(self.state, indent=1))
                try:
                    self._start_all(detach, timeout)
                    break
                except BaseException as e:
                    clash = isinstance(e, Exception) and self._port_clash()
                    self._stop_all()
                    if not clash or attempt == PORT_ATTEMPTS:
                        raise
                    print(f"seglake cluster: {clash} (taken by another program since it was picked); "
                          f"starting again on new ports ({attempt + 1}/{PORT_ATTEMPTS})", file=sys.stderr)
            self._ensure_bucket()
            _write_private(self.env_file, self.env_text())
            return "started"

    def _port_clash(self) -> str | None:
        """The log line of a server that could not bind its port, if one could not: the
        ports are picked free, then bound by other processes, so on a busy machine another
        program may take one in between."""
        for s in self._servers:
            try:
                tail = s.log_file.read_text(errors="replace")[-4000:]
            except OSError:
                continue
            for line in tail.splitlines():
                if any(m in line for m in PORT_CLASH_MARKERS):
                    return f"{self._label(s)}: {line.strip()[:200]}"
        return None

    def _start_all(self, detach: bool, timeout: float) -> None:
        t0 = time.time()
        deadline = t0 + timeout
        timings = self.state.setdefault("startup_s", {})
        for s in [self.master, *self.etcd, self.weed]:
            s.launch(detach)
        # workers once the master's RPC port listens: a worker that misses the master
        # retries only every 5-15 s; their JVMs start while the master finishes
        while not port_open(self.master.ports["rpc"]):
            if self.master.proc.poll() is not None:
                raise ClusterError(f"the Spark master exited with {self.master.proc.returncode}; see "
                                   f"{self.master.log_file}:\n" + self.master.log_file.read_text()[-2000:])
            if time.time() > deadline:
                raise ClusterError(f"the Spark master did not listen within {timeout:g} s; see {self.master.log_file}")
            time.sleep(0.1)
        for w in self.spark_workers:
            w.launch(detach)
        for s in [*self.etcd, self.weed, self.master, *self.spark_workers]:  # members: healthy together
            s.wait_healthy(max(1.0, deadline - time.time()))
            timings[self._label(s)] = round(time.time() - t0, 2)
        timings["total"] = round(time.time() - t0, 2)

    def _ensure_bucket(self) -> None:
        from seglake.storage import open_store

        open_store(self.settings()).ensure_bucket()

    def down(self) -> list[str]:
        """Stop every server of the cluster that runs (by pid); returns what was stopped."""
        with self._locked():
            if not self._load():
                return []
            stopped = self._stop_all()
            self.env_file.unlink(missing_ok=True)
            return stopped

    def _stop_all(self) -> list[str]:
        """Workers (and their executors) first, then the master, S3, the etcd members."""
        def stop(s: Server) -> str | None:
            pid = self.owned_pid(s)
            if pid is None:
                s.pid_file.unlink(missing_ok=True)
                s.proc = None
                s._stop_watchdog()
                return None
            s.stop(timeout=15)  # our child, or (started by another process) the pid of its pid file
            return f"{self._label(s)} (pid {pid})"

        order = [self.spark_workers, [self.master], [self.weed], self.etcd]
        out: list[str] = []
        with ThreadPoolExecutor(4) as pool:
            for group in order:
                out += [x for x in pool.map(stop, group) if x]
        return out

    def _label(self, s: Server) -> str:
        if isinstance(s, EtcdMember):
            return f"etcd {s.member}"
        if isinstance(s, SparkWorker):
            return f"spark {s.state_dir.name}"
        return "spark master" if isinstance(s, SparkMaster) else "s3 (seaweedfs)"

    # -- health and introspection ---------------------------------------------------
    def healthy(self) -> bool:
        return all(s.healthy() for s in self._servers)

    def member_status(self, member: EtcdMember) -> dict | None:
        """etcd's maintenance status of one member (its id, the leader's id), or None."""
        try:
            return _http_json(f"http://{member.endpoint}/v3/maintenance/status", {}, timeout=1.0)
        except Exception:  # noqa: BLE001 - down
            return None

    def leader(self) -> int | None:
        """Index (in self.etcd) of the member that leads, as the live members see it."""
        ids = {}
        leader_id = None
        for i, m in enumerate(self.etcd):
            st = self.member_status(m)
            if st:
                ids[st["header"]["member_id"]] = i
                leader_id = leader_id or st.get("leader")
        return ids.get(leader_id) if leader_id else None

    def move_leader(self, to: int, timeout: float = 10.0) -> None:
        """Hand leadership to member `to` (etcd's MoveLeader, sent to the current leader)."""
        lead = self.leader()
        if lead is None:
            raise ClusterError("no etcd leader to move from")
        if lead == to:
            return
        target = self.member_status(self.etcd[to])["header"]["member_id"]
        _http_json(f"http://{self.etcd[lead].endpoint}/v3/maintenance/transfer-leadership",
                   {"targetID": target}, timeout=timeout)

    def kill_member(self, i: int) -> int:
        """SIGKILL etcd member `i` by its pid (what a crashed host looks like); its pid."""
        m = self.etcd[i]
        pid = self.owned_pid(m)
        if pid is None:
            raise ClusterError(f"etcd {m.member} is not running")
        os.kill(pid, signal.SIGKILL)
        if m.proc is not None:
            m.proc.wait(timeout=10)
        deadline = time.time() + 10
        while pid_alive(pid) and time.time() < deadline:
            time.sleep(0.02)
        m.proc = None
        m._stop_watchdog()
        m.pid_file.unlink(missing_ok=True)
        return pid

    def restart_member(self, i: int, detach: bool = False, timeout: float = 60.0) -> None:
        """Start member `i` again on its ports and data dir (it rejoins), wait until the
        whole cluster is healthy."""
        self.restart_members([i], detach, timeout)

    def restart_members(self, indices: list[int], detach: bool = False, timeout: float = 60.0) -> None:
        """Start these members again together (after a lost quorum none of them is
        healthy alone), wait until the whole cluster is healthy."""
        for i in indices:
            self.etcd[i].launch(detach)
        for i in indices:
            self.etcd[i].wait_healthy(timeout)
        deadline = time.time() + timeout
        while not all(x.healthy() for x in self.etcd):
            if time.time() > deadline:
                raise ClusterError("etcd cluster not healthy after a member restart")
            time.sleep(0.1)

    def spark_apps(self) -> list[dict]:
        """Applications the master ran or runs, newest last: id, name, state, duration,
        and the executors each worker started for it (worker id, host:port)."""
        st = self.master.state()
        apps = {a["id"]: {"id": a["id"], "name": a["name"], "state": a.get("state"),
                          "duration_ms": a.get("duration"), "executors": []}
                for a in st.get("completedapps", []) + st.get("activeapps", [])}
        for w in self.spark_workers:
            try:
                ws = _http_json(f"{w.webui}/json/")
            except Exception:  # noqa: BLE001 - a worker that is down ran nothing we can list
                continue
            for ex in ws.get("executors", []) + ws.get("finishedexecutors", []):
                app = apps.get(ex.get("appid"))
                if app is not None:
                    app["executors"].append({"worker": ws.get("id"), "host": f"{LOOPBACK}:{w.ports['rpc']}",
                                             "executor": ex.get("id")})
        return sorted(apps.values(), key=lambda a: a["id"])

    def status(self) -> dict:
        lead = self.leader()
        members = [{"member": m.member, "endpoint": m.endpoint, "pid": self.owned_pid(m),
                    "healthy": bool(self.owned_pid(m)) and m.healthy(), "leader": i == lead}
                   for i, m in enumerate(self.etcd)]
        try:
            mstate = self.master.state()
        except Exception:  # noqa: BLE001
            mstate = {}
        workers = []
        for w in self.spark_workers:
            reg = w.registered(mstate) or {}
            workers.append({"worker": reg.get("id"), "host": f"{LOOPBACK}:{w.ports['rpc']}", "pid": self.owned_pid(w),
                            "alive": bool(reg), "cores": w.cores, "memory": w.memory})
        return {
            "base": str(self.base),
            "etcd": {"endpoints": self.etcd_endpoints, "members": members},
            "s3": {"endpoint": self.s3_endpoint, "bucket": self.state["bucket"], "store_uri": self.store_uri,
                   "pid": self.owned_pid(self.weed),
                   "healthy": bool(self.owned_pid(self.weed)) and self.weed.healthy()},
            "spark": {"master": self.spark_master_url, "webui": self.master.webui, "pid": self.owned_pid(self.master),
                      "alive": mstate.get("status") == "ALIVE", "workers": workers},
            "startup_s": self.state.get("startup_s", {}),
            "env_file": str(self.env_file),
        }

    @classmethod
    def attach(cls, base: Path) -> "ClusterStack":
        """The cluster recorded in `base` (started by another process), or ClusterError."""
        stack = cls(base=base)
        if not stack._load():
            raise ClusterError(f"no cluster in {stack.base} (run `seglake cluster up`)")
        return stack

    # -- the profile ----------------------------------------------------------------
    def settings_dict(self, root: str = "seglake", prefix: str | None = None) -> dict:
        w = self.state["weed"]
        return {"etcd_endpoint": self.etcd_endpoints, "etcd_root": root,
                "store_uri": f"s3://{self.state['bucket']}/{prefix or self.state['prefix']}",
                "s3_endpoint": self.s3_endpoint, "s3_access_key": w["access_key"], "s3_secret_key": w["secret_key"]}

    def settings(self, root: str = "seglake", prefix: str | None = None, **extra):
        from seglake.config import Settings

        return Settings.from_dict({**self.settings_dict(root, prefix), **extra})

    def airflow_env(self, root: str = "seglake", prefix: str | None = None) -> dict[str, str]:
        """AIRFLOW_CONN_* and AIRFLOW_VAR_SEGLAKE_CONFIG for this cluster (the S3 secret is
        in the aws_default connection: treat the result as a secret)."""
        s = self.settings_dict(root, prefix)
        first = self.etcd[0]
        return {
            "AIRFLOW_CONN_ETCD_DEFAULT": json.dumps({
                "conn_type": "etcd", "host": LOOPBACK, "port": first.ports["client"],
                "extra": {"endpoints": s["etcd_endpoint"], "root": root}}),
            "AIRFLOW_CONN_AWS_DEFAULT": json.dumps({
                "conn_type": "aws", "login": s["s3_access_key"], "password": s["s3_secret_key"],
                "extra": {"endpoint_url": s["s3_endpoint"], "region_name": "us-east-1"}}),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({
                "conn_type": "spark", "host": f"spark://{LOOPBACK}", "port": self.master.ports["rpc"],
                "extra": {"deploy-mode": "client"}}),
            "AIRFLOW_VAR_SEGLAKE_CONFIG": json.dumps({"store_uri": s["store_uri"]}),
        }

    def cli_env(self, root: str = "seglake", prefix: str | None = None) -> dict[str, str]:
        s = self.settings_dict(root, prefix)
        return {f"SEGLAKE_{k.upper()}": v for k, v in s.items()}

    def env_text(self) -> str:
        lines = [f"# seglake cluster profile, written by `seglake cluster up` ({self.base}).",
                 "# Holds the S3 secret (mode 0600). Use: set -a; . .dev/cluster/env; set +a"]
        env = {**self.cli_env(), **self.airflow_env()}
        lines += [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())]
        return "\n".join(lines) + "\n"
