"""A real Milvus standalone server (PyPI `milvus` 2.3.5) on loopback, for tests and for
`make milvus-up`: started and stopped like the project's other servers (devstack.Server:
pid file, own session, watchdog, bounded wait, stopped by pid).

    prepare (milvus venv python, scripts/milvus_prepare.py)   launch (this process)
      wheel renders configs/milvus.yaml (0600)          ->      bin/milvus run standalone
      wheel unpacks bin/ once into a shared cache              --alias <unique>, own session
                                                               wait for :metrics/healthz

- The project venv cannot import `milvus`/`pymilvus` (pymilvus 2.3.5 pins grpcio 1.58, needs
  marshmallow<4): only the helper runs in .dev/milvus-venv (scripts/milvus_venv.sh makes it).
- External etcd (`etcd.use.embed=false`: the embedded one would bind 2379/2380), each server
  its own `etcd.rootPath`; storage on S3 (`common.storageType=minio`,
  SeaweedFS; Milvus creates the bucket) or on local disk. Keys only in the 0600 config file,
  never in an argument, its environment (AWS_*/MINIO_* are not passed on), a log line or a repr.
- Every listening port is picked here (proxy, proxy internal, metrics/healthz, each
  coordinator's and node's gRPC port), free on the wildcard address too: no default port
  (19530, 9091, 2379) is ever bound. A port taken before Milvus binds it is retried with
  fresh ports (start(attempts=3)).
- The pid file clash: Milvus 2.3 always writes its pid file to /run/milvus (or /tmp/milvus),
  named `<role>.pid`, or `<role>-<alias>.pid` with `--alias` (cmd/milvus/util.go
  getPidFileName; MILVUS_RUN_DIR, which the wheel sets, is not read by 2.3.5). Each server
  runs with a unique alias, so two servers never write, lock or remove each other's file; a
  SIGKILLed server's file is swept (only `seglake-` aliases, only when its pid is dead).
- Milvus 2.3.5 has no listen-address setting: its gRPC servers and metrics server bind
  ":port" (all interfaces). Every `<role>.ip` is 127.0.0.1, so every address it registers
  in etcd (and so every address any component or client is sent to) is loopback.
- `common.gracefulStopTimeout` is small (5 s): on SIGTERM it exits within it (rc 0; 0.1 s
  idle, 5 s with a loaded collection); stop() escalates to SIGKILL after its timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from seglake.dev.devstack import Server, free_port, port_open

REPO = Path(__file__).resolve().parents[3]
MILVUS_VENV = Path(os.environ.get("MILVUS_VENV", REPO / ".dev" / "milvus-venv"))
BIN_CACHE = Path(os.environ.get("SEGLAKE_MILVUS_BIN", REPO / ".dev" / "milvus-bin"))
ROLES = ("rootCoord", "proxy", "queryCoord", "queryNode", "indexNode", "dataCoord", "dataNode")
# template item -> our port name
_PORT_ITEMS = {"proxy_port": "proxy", "proxy_internal_port": "proxy_internal",
               "root_coord_port": "root_coord", "query_coord_port": "query_coord",
               "query_node_port": "query_node", "index_coord_port": "index_coord",
               "index_node_port": "index_node", "data_coord_port": "data_coord",
               "data_node_port": "data_node"}


PID_DIRS = (Path("/run/milvus"), Path("/tmp/milvus"))   # Milvus 2.3 falls back to /tmp/milvus
ALIAS_PREFIX = "seglake-"


def sweep_stale_pid_files() -> list[Path]:
    """Remove Milvus pid files of servers this project started (alias `seglake-...`) whose
    process is gone: a SIGKILLed Milvus cannot remove its own. Never another's file, never
    one whose pid is alive."""
    from seglake.dev.devstack import pid_alive

    gone = []
    for d in PID_DIRS:
        for f in d.glob(f"standalone-{ALIAS_PREFIX}*.pid") if d.is_dir() else ():
            try:
                pid = int(f.read_text().strip() or 0)
            except (OSError, ValueError):
                continue
            if pid and not pid_alive(pid):
                f.unlink(missing_ok=True)
                gone.append(f)
    return gone


def _bindable_wildcard(port: int) -> bool:
    import socket

    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            with socket.socket(family) as sock:
                sock.bind((addr, port))
        except OSError as e:
            if family == socket.AF_INET6 and e.errno == 97:  # no IPv6 here
                continue
            return False
    return True


class MilvusUnavailable(RuntimeError):
    """The machine cannot run the Milvus test server (no venv and it cannot be made)."""


def milvus_python(create: bool = True) -> Path:
    """The Milvus venv's python, made by scripts/milvus_venv.sh when absent (idempotent:
    a present, complete venv costs one import check)."""
    py = MILVUS_VENV / "bin" / "python"
    if py.exists() and (MILVUS_VENV / ".seglake-ready").exists():
        return py
    if not create:
        raise MilvusUnavailable(f"no Milvus venv at {MILVUS_VENV} (run `make setup`)")
    r = subprocess.run([str(REPO / "scripts" / "milvus_venv.sh"), str(MILVUS_VENV)],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise MilvusUnavailable(f"scripts/milvus_venv.sh failed: {r.stderr[-1500:]}")
    (MILVUS_VENV / ".seglake-ready").touch()
    return py


@dataclass
class S3Target:
    """Where Milvus keeps its binlogs: a bucket of an S3 server on loopback."""

    endpoint: str            # http://127.0.0.1:PORT
    bucket: str
    root_path: str
    access_key: str
    secret_key: str = field(default="", repr=False)


@dataclass
class MilvusServer(Server):
    """One Milvus standalone on loopback against an external etcd (`etcd_endpoint`, its own
    `etcd_root`) and S3 (`s3`) or local storage (s3=None)."""

    name: str = "milvus"
    etcd_endpoint: str = ""
    etcd_root: str = ""
    s3: S3Target | None = None
    graceful_stop: int = 5
    alias: str = ""
    config: dict = field(default_factory=dict)   # more milvus.yaml settings ("a.b.c": "value"), e.g. for tests
    venv: Path | None = None        # another Milvus wheel's venv (another 2.3.x); default MILVUS_VENV
    bin_cache: Path | None = None   # where that wheel's binaries are unpacked; default BIN_CACHE
    prepared: dict = field(default_factory=dict)
    _given_ports: dict = field(default_factory=dict, repr=False)
    started_at: float = 0.0
    healthy_after: float = 0.0   # seconds from launch to the first healthy /healthz

    def __post_init__(self):
        if not self.etcd_endpoint:
            raise ValueError("MilvusServer needs an external etcd (etcd_endpoint)")
        host = self.etcd_endpoint.rpartition(":")[0]
        if host not in ("127.0.0.1", "localhost"):
            raise ValueError(f"loopback only: etcd_endpoint {self.etcd_endpoint!r}")
        if self.s3 and not self.s3.endpoint.startswith(("http://127.0.0.1:", "http://localhost:")):
            raise ValueError(f"loopback only: S3 endpoint {self.s3.endpoint!r}")
        self.etcd_root = self.etcd_root or f"milvus-{uuid.uuid4().hex[:8]}"
        self.alias = self.alias or f"{ALIAS_PREFIX}{uuid.uuid4().hex[:10]}"
        self._given_ports = dict(self.ports)
        self._pick_ports()

    def _pick_ports(self) -> None:
        """Every port not given: free on loopback AND on the wildcard address, since Milvus
        2.3.5 binds ":port" (a port another process holds on another address would pass a
        127.0.0.1-only check)."""
        self.ports = dict(self._given_ports)
        taken = set(self.ports.values())
        for k in ("metrics", *_PORT_ITEMS.values()):
            while k not in self.ports:
                p = free_port()
                if p not in taken and _bindable_wildcard(p):
                    self.ports[k] = p
                    taken.add(p)

    @property
    def address(self) -> str:
        """host:port of the proxy (pymilvus `connections.connect(uri=f"http://{address}")`)."""
        return f"127.0.0.1:{self.ports['proxy']}"

    @property
    def healthz(self) -> str:
        return f"http://127.0.0.1:{self.ports['metrics']}/healthz"

    @property
    def milvus_pid_file(self) -> str:
        """Milvus's own pid file (see the module doc): /run/milvus or /tmp/milvus."""
        return f"standalone-{self.alias}.pid"

    def prepare(self) -> dict:
        """Render the config and unpack the binaries with the wheel's code (milvus venv)."""
        data, logs = self.state_dir / "data", self.state_dir / "logs"
        for d in (data, logs):
            d.mkdir(parents=True, exist_ok=True)
        items = {item: self.ports[k] for item, k in _PORT_ITEMS.items()}
        items.update({"etcd_log_path": str(logs / "etcd-embed.log"), "system_log_path": str(logs),
                      "etcd_data_dir": str(data / "etcd.data"), "local_storage_dir": str(data),
                      "rocksmq_data_dir": str(data / "rocksmq")})
        extras = {"etcd.use.embed": "false", "etcd.endpoints": self.etcd_endpoint,
                  "etcd.rootPath": self.etcd_root, "common.gracefulStopTimeout": str(self.graceful_stop),
                  "log.stdout": "false", "log.level": "warn"}
        for role in ROLES:
            extras[f"{role}.ip"] = "127.0.0.1"
        if self.s3:
            host, _, port = self.s3.endpoint.split("://", 1)[1].partition(":")
            extras.update({"common.storageType": "minio", "minio.address": host, "minio.port": port,
                           "minio.bucketName": self.s3.bucket, "minio.rootPath": self.s3.root_path,
                           "minio.accessKeyID": self.s3.access_key,
                           "minio.secretAccessKey": self.s3.secret_key, "minio.useSSL": "false"})
        else:
            extras["common.storageType"] = "local"
        extras.update({k: str(v) for k, v in self.config.items()})
        req = {"base_dir": str(self.state_dir), "bin_cache": str(self.bin_cache or BIN_CACHE), "items": items,
               "extras": extras}
        python = self.venv / "bin" / "python" if self.venv else milvus_python()
        r = subprocess.run([str(python), str(REPO / "scripts" / "milvus_prepare.py")],
                           input=json.dumps(req), capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"milvus_prepare.py failed: {r.stderr[-1500:]}")
        self.prepared = json.loads(r.stdout)
        (self.state_dir / "server.json").write_text(json.dumps(self.describe(), indent=1))
        return self.prepared

    def describe(self) -> dict:
        """What a client needs (no secret): ports, roots, the alias."""
        return {"address": self.address, "ports": self.ports, "etcd_endpoint": self.etcd_endpoint,
                "etcd_root": self.etcd_root, "alias": self.alias,
                "bucket": self.s3.bucket if self.s3 else None,
                "root_path": self.s3.root_path if self.s3 else None,
                "version": self.prepared.get("version")}

    def command(self) -> list[str]:
        return [self.prepared["exe"], "run", "standalone", f"--alias={self.alias}"]

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AWS_", "MINIO_", "ETCD_", "MILVUS", "SEGLAKE_S3"))}
        env.update({"DEPLOY_MODE": "STANDALONE", "METRICS_PORT": str(self.ports["metrics"]),
                    "MILVUSCONF": str(self.state_dir / "configs"),
                    "LD_LIBRARY_PATH": ":".join(p for p in (self.prepared["bin_dir"],
                                                            os.environ.get("LD_LIBRARY_PATH")) if p)})
        return env

    def healthy(self) -> bool:
        if not port_open(self.ports["metrics"]):
            return False
        try:
            with urllib.request.urlopen(self.healthz, timeout=1) as r:
                return r.status == 200 and b"OK" in r.read()
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def start(self, timeout: float = 120.0, detach: bool = False, attempts: int = 3) -> "MilvusServer":
        """Prepare (once), launch, bounded wait for /healthz. A port taken between the pick
        and Milvus's bind (another process on this shared machine; Milvus then panics with
        "bind: address already in use") is retried with fresh ports, `attempts` times."""
        sweep_stale_pid_files()
        for attempt in range(1, attempts + 1):
            if not self.prepared:
                self.prepare()
            self.started_at = time.time()
            log_at = self.log_file.stat().st_size if self.log_file.exists() else 0
            try:
                self.launch(detach).wait_healthy(timeout)
            except RuntimeError:
                with open(self.log_file, "rb") as f:
                    f.seek(log_at)
                    clash = b"bind: address already in use" in f.read()
                if not clash or attempt == attempts or len(self._given_ports) > 0:
                    raise
                sweep_stale_pid_files()
                self._pick_ports()
                self.prepared = {}
                continue
            self.healthy_after = time.time() - self.started_at
            return self
        raise AssertionError("unreachable")

    def rss_bytes(self) -> int:
        """Resident memory of the server's process group (the binary has no children)."""
        pid = self.proc.pid if self.proc else self.running_pid()
        if not pid:
            return 0
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (Milvus stops within gracefulStopTimeout and removes its pid file), then
        SIGKILL after `timeout`; its pid file is removed if a kill left it."""
        super().stop(timeout)
        sweep_stale_pid_files()


# ------------------------------------------------------------------ make milvus-up/down/status
class MilvusStack:
    """A developer's Milvus (`make milvus-up`): the stack's etcd (`make up`, rootPath
    `seglake-dev-milvus`) + a SeaweedFS of its own (bucket `milvus`, rootPath `files`) + Milvus,
    all detached, state under $SEGLAKE_HOME/milvus: `stack.json` (0600: it holds the S3 keys)
    keeps the ports and the alias, so `down`/`status` from another process find them."""

    ETCD_ROOT = "seglake-dev-milvus"

    def __init__(self, base: Path, etcd_endpoint: str):
        self.base, self.etcd_endpoint = base, etcd_endpoint
        self.state_file = base / "stack.json"

    def _servers(self):
        from seglake.dev.devstack import WeedServer

        st = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}
        weed = WeedServer(state_dir=self.base / "weed", ports=st.get("weed_ports", {}),
                          secret_key=st.get("secret_key", ""))
        milvus = MilvusServer(state_dir=self.base / "server", etcd_endpoint=st.get("etcd", self.etcd_endpoint),
                              etcd_root=self.ETCD_ROOT, ports=st.get("milvus_ports", {}),
                              alias=st.get("alias", ""),
                              s3=S3Target(endpoint=weed.endpoint, bucket="milvus", root_path="files",
                                          access_key=weed.access_key, secret_key=weed.secret_key))
        if not st:
            self._save(weed, milvus)
        return weed, milvus

    def _save(self, weed, milvus) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"weed_ports": weed.ports, "secret_key": weed.secret_key, "etcd": milvus.etcd_endpoint,
                       "milvus_ports": milvus.ports, "alias": milvus.alias}, f)

    def up(self, timeout: float = 120.0) -> dict:
        weed, milvus = self._servers()
        if not weed.running_pid():
            weed.start(timeout=60, detach=True)
        if not milvus.running_pid():
            if not milvus.prepared and not (milvus.state_dir / "server.json").exists():
                milvus._given_ports = {}   # a first start may re-pick a port taken meanwhile
            milvus.start(timeout=timeout, detach=True)
            self._save(weed, milvus)
            print(f"milvus started in {milvus.healthy_after:.1f}s")
        self.write_env(weed, milvus)
        return self.status()

    @property
    def env_file(self) -> Path:
        return self.base / "env"

    def write_env(self, weed, milvus) -> Path:
        """`source .dev/milvus/env`: the bucket's endpoint and keys as the CLI reads them
        (SEGLAKE_MILVUS_S3_*; never on a command line), and, as comments, the flags that
        name this Milvus in `seglake milvus backup|restore`. 0600: it holds the secret."""
        import shlex

        lines = ["# make milvus-up: source this file, then `seglake milvus backup|restore` read this Milvus's bucket",
                 f"#   seglake milvus backup --milvus-etcd {milvus.etcd_endpoint} --milvus-root {milvus.etcd_root} "
                 f"--bucket milvus --bucket-root files ...",
                 f"#   seglake milvus restore ... --address {milvus.address} --bucket milvus ..."]
        for k, v in (("SEGLAKE_MILVUS_S3_ENDPOINT", weed.endpoint), ("SEGLAKE_MILVUS_S3_ACCESS_KEY", weed.access_key),
                     ("SEGLAKE_MILVUS_S3_SECRET_KEY", weed.secret_key)):
            lines.append(f"export {k}={shlex.quote(str(v))}")
        self.base.mkdir(parents=True, exist_ok=True)
        tmp = self.env_file.with_name(".env.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, self.env_file)
        return self.env_file

    def down(self) -> list[str]:
        if not self.state_file.exists():
            return []
        weed, milvus = self._servers()
        stopped = []
        for s in (milvus, weed):
            pid = s.running_pid()
            if pid:
                s.stop(timeout=20)
                stopped.append(f"{s.name} (pid {pid})")
        return stopped

    def status(self) -> dict:
        if not self.state_file.exists():
            return {"milvus": "down", "s3": "down"}
        weed, milvus = self._servers()
        mp, wp = milvus.running_pid(), weed.running_pid()
        return {"milvus": "up" if mp and milvus.healthy() else "down", "pid": mp,
                "address": milvus.address, "healthz": milvus.healthz, "etcd": milvus.etcd_endpoint,
                "etcd_root": milvus.etcd_root, "alias": milvus.alias,
                "s3": "up" if wp and weed.healthy() else "down", "s3_pid": wp, "s3_endpoint": weed.endpoint,
                "bucket": "milvus", "root_path": "files", "rss_mib": round(milvus.rss_bytes() / 2**20),
                "dir": str(self.base),
                "env": f"source {self.env_file}  (the bucket's keys for seglake milvus backup/restore)"}


def main(argv: list[str] | None = None) -> int:
    """python -m seglake.dev.milvus up|down|status (make milvus-up / milvus-down / milvus-status)."""
    import argparse

    from seglake.config import DEFAULT_HOME, Settings

    ap = argparse.ArgumentParser(prog="seglake.dev.milvus")
    ap.add_argument("action", choices=["up", "down", "status"])
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args(argv)
    s = Settings.load()
    stack = MilvusStack(Path(DEFAULT_HOME) / "milvus", s.etcd_endpoint)
    if a.action == "up":
        try:
            st = stack.up(a.timeout)
        except MilvusUnavailable as e:
            print(f"cannot run Milvus here: {e}")
            return 2
    elif a.action == "down":
        stopped = stack.down()
        print("stopped: " + ", ".join(stopped) if stopped else "milvus not running: nothing to stop")
        return 0
    else:
        st = stack.status()
    for k, v in st.items():
        print(f"{k}: {v}")
    return 0 if st.get("milvus") == "up" else 3


if __name__ == "__main__":
    import sys

    sys.exit(main())
