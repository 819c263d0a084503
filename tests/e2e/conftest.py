"""`airflow standalone` for the end-to-end tests: one per session, on free loopback ports,
with its own AIRFLOW_HOME under .dev/test/e2e, connections and the seglake Variable given
through the environment (pointing at the session's test etcd and a private store).

Stopped at the end by process group (standalone and every child it started: api-server,
scheduler, dag-processor, triggerer, task processes, Spark JVMs); processes that left
the group are found by a marker in their environment. If the test process dies without
running its finalizers, a watchdog in its own session kills the group.

The heavy lock (/tmp/seglake-heavy.lock) is NOT taken here: wrap a manual run in
`flock /tmp/seglake-heavy.lock ...` (a lock taken in-process would deadlock a caller that
already holds it for the whole suite).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from seglake.dev.devstack import free_port   # below the kernel's ephemeral range (its doc says why)

REPO = Path(__file__).resolve().parents[2]
E2E_HOME = REPO / ".dev" / "test" / "e2e"
ARTIFACTS = REPO / ".dev" / "test" / "artifacts"
POLICY = REPO / "tests" / "airflow_policy"
MARKER = "E2E_SEGLAKE_SESSION"  # not SEGLAKE_*: config refuses unknown SEGLAKE_ names
DAG_IDS = ("verify_collection", "snapshot_create", "snapshot_restore", "snapshot_drop", "gc", "wal_flush",
           "drop_collection", "copy_segment_job")
COPY_FAULT = "copy.after_file:sleep=0.2"   # slows the DAGs' copies enough to catch one mid-way
HEALTHY_TIMEOUT = 150
PARSE_TIMEOUT = 150



def _marked_pids(marker: str) -> list[int]:
    """Processes whose environment carries this session's marker (ours, by construction)."""
    needle = f"{MARKER}={marker}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                out.append(int(d.name))
        except OSError:
            continue
    return out


def _kill_group_and_marked(pgid: int, marker: str, timeout: float = 20.0) -> None:
    """SIGTERM the group and the marked stragglers, wait, then SIGKILL what is left."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        for pid in _marked_pids(marker):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + wait
        while time.time() < deadline:
            try:
                os.waitpid(-pgid, os.WNOHANG)
            except ChildProcessError:
                pass
            if not _marked_pids(marker):
                return
            time.sleep(0.2)


@dataclass
class Standalone:
    base: str
    home: Path
    root: str
    store_uri: str
    token: str = ""
    password: str = field(default_factory=lambda: uuid.uuid4().hex)
    proc: subprocess.Popen | None = None
    marker: str = field(default_factory=lambda: uuid.uuid4().hex)
    ports: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    passwords: dict = field(default_factory=dict)

    def token_of(self, user: str) -> str:
        """A JWT of one of the users (USERS), by logging in as Airflow's UI does."""
        import httpx

        r = httpx.post(self.base + "/auth/token", json={"username": user, "password": self.passwords[user]},
                       timeout=10)
        r.raise_for_status()
        return r.json()["access_token"]

    # -- REST -------------------------------------------------------------------------
    def request(self, method: str, path: str, body=None, token: str | None = None, timeout: float = 90):
        """One REST call (90 s: a machine shared by several suites is slow at times, not gone)."""
        import httpx

        headers = {"Authorization": f"Bearer {token if token is not None else self.token}"} \
            if (token if token is not None else self.token) else {}
        return httpx.request(method, self.base + path, json=body, headers=headers, timeout=timeout)

    def trigger(self, dag_id: str, conf: dict):
        return self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})

    def run_count(self, dag_id: str) -> int:
        r = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=1")
        r.raise_for_status()
        return r.json()["total_entries"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 240) -> str:
        deadline = time.time() + timeout
        state = None
        while time.time() < deadline:
            r = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            r.raise_for_status()
            state = r.json()["state"]
            if state in ("success", "failed"):
                return state
            time.sleep(0.5)
        raise TimeoutError(f"{dag_id} run {run_id} still {state} after {timeout}s; tasks: {self.task_states(dag_id, run_id)}")

    def task_states(self, dag_id: str, run_id: str) -> dict:
        r = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {t["task_id"]: t["state"] for t in r.json().get("task_instances", [])} if r.status_code == 200 else {}

    def run(self, dag_id: str, run_id: str) -> dict:
        r = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        r.raise_for_status()
        return r.json()

    def task_log(self, dag_id: str, run_id: str, task_id: str, tries: int = 3, wait: float = 30.0) -> str:
        """The task's log over its first `tries` tries (text), through REST; asked again
        for up to `wait` seconds while the server has none yet (a loaded machine)."""
        deadline = time.time() + wait
        while True:
            text = self._task_log(dag_id, run_id, task_id, tries)
            if text.strip() or time.time() > deadline:
                return text
            time.sleep(1)

    def _task_log(self, dag_id: str, run_id: str, task_id: str, tries: int) -> str:
        out = []
        for n in range(1, tries + 1):
            r = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{n}"
                                    "?full_content=true", timeout=30)
            if r.status_code != 200:
                break
            body = r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text
            content = body.get("content", body) if isinstance(body, dict) else body
            out.append(json.dumps(content) if not isinstance(content, str) else content)
        return "\n".join(out)

    def log_tail(self, n: int = 4000) -> str:
        p = self.home / "standalone.log"
        return p.read_text(errors="replace")[-n:] if p.exists() else ""


def _env(sa: Standalone, etcd_endpoint: str) -> dict:
    host, _, port = etcd_endpoint.rpartition(":")
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SEGLAKE_"))}
    env.update({
        MARKER: sa.marker,
        "AIRFLOW_HOME": str(sa.home),
        "SEGLAKE_HOME": str(sa.home.parent),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{role}" for u, role in USERS.items()),
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        # SQLite: wait for the write lock up to 60 s, not 5 s and a 500 (CI stop 42: PATCH is_paused)
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "seglake_airflow.airflow_db.CONNECT_ARGS",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": "seglake_airflow.airflow_db.CONNECT_ARGS_ASYNC",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(sa.ports["api"]),
        "AIRFLOW__API__BASE_URL": sa.base,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{sa.base}/execution/",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(sa.ports["worker_log"]),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(sa.ports["trigger_log"]),
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(sa.ports["scheduler_health"]),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        # the DAG files never change during a run: parsed once at start, never again (not every
        # 30 s: the re-parses were ~8 % of the suite's CPU). Not every 10 min either: a re-parse
        # while a run of a max_active_runs=1 DAG is active can write a stale "max active runs
        # reached" flag after the scheduler cleared it, and the scheduler then creates no
        # scheduled run until the next re-parse (CI, stop 37: gc's scheduled run never came)
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "86400",
        "AIRFLOW_CONN_ETCD_DEFAULT": json.dumps({"conn_type": "etcd", "host": host, "port": int(port),
                                                 "extra": {"root": sa.root}}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]",
                                                  "extra": {"deploy-mode": "client"}}),
        "AIRFLOW_VAR_SEGLAKE_CONFIG": json.dumps({"store_uri": sa.store_uri}),
        # the run_note teardown sets run notes through the REST API as this user
        "AIRFLOW_CONN_AIRFLOW_API": json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": sa.ports["api"],
                                                "schema": "http", "login": "admin", "password": sa.password}),
        # gc: the project's default (no schedule; test_gc_form_browser checks that unpausing
        # starts nothing); wal_flush would run every 5 minutes
        "SEGLAKE_WAL_FLUSH_SCHEDULE": "none",
        "SEGLAKE_FAULTS": COPY_FAULT,
        # this checkout's engine and plugins first (the venv may hold another checkout's), and
        # the test Airflow's cluster policy (airflow_local_settings: sensors poke every 1 s)
        "PYTHONPATH": os.pathsep.join([str(REPO / "include"), str(REPO / "plugins"), str(POLICY)]
                                      + [p for p in [os.environ.get("PYTHONPATH")] if p]),
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    })
    return env


def _watchdog(parent: int, pgid: int) -> subprocess.Popen:
    """Kills the standalone group once `parent` (this test process) is gone."""
    code = (f"while kill -0 {parent} 2>/dev/null; do sleep 1; done; "
            f"kill -TERM -- -{pgid} 2>/dev/null; sleep 10; kill -KILL -- -{pgid} 2>/dev/null")
    return subprocess.Popen(["bash", "-c", code], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


USERS = {"admin": "admin", "viewer": "viewer"}   # user -> simple auth manager role


@contextmanager
def launch(etcd_server, name: str = "airflow", extra_env: dict | None = None) -> Iterator[Standalone]:
    """A running `airflow standalone` under E2E_HOME/name (its own AIRFLOW_HOME, etcd root
    and store), healthy, every seglake DAG parsed (paused: DAGs are created paused), an
    admin token; the users of USERS (the viewer's token: `sa.token_of("viewer")`).
    `extra_env` overrides the environment (e.g. SEGLAKE_GC_SCHEDULE)."""
    import httpx

    t0 = time.time()
    top = E2E_HOME if name == "airflow" else E2E_HOME / name
    if name == "airflow":
        shutil.rmtree(E2E_HOME, ignore_errors=True)
    else:
        shutil.rmtree(top, ignore_errors=True)
    home = top / "airflow"
    home.mkdir(parents=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    ports = {k: free_port() for k in ("api", "worker_log", "trigger_log", "scheduler_health")}
    sa = Standalone(base=f"http://127.0.0.1:{ports['api']}", home=home, root=f"e2e{uuid.uuid4().hex[:8]}",
                    store_uri=str(top / "store"), ports=ports)
    # known passwords (simple auth manager keeps existing ones): the run_note connection
    # logs in as admin, the viewer tests as viewer
    sa.passwords = {user: (sa.password if user == "admin" else uuid.uuid4().hex) for user in USERS}
    (home / "simple_auth_manager_passwords.json.generated").write_text(json.dumps(sa.passwords))
    log = open(home / "standalone.log", "wb")
    env = {**_env(sa, etcd_server.endpoint), **(extra_env or {})}
    sa.proc = subprocess.Popen([str(Path(sys.executable).parent / "airflow"), "standalone"],
                               env=env, cwd=str(home), stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    pgid = sa.proc.pid
    dog = _watchdog(os.getpid(), pgid)
    stopped = []

    def stop():
        if stopped:
            return
        stopped.append(True)
        t = time.time()
        _kill_group_and_marked(pgid, sa.marker)
        try:
            sa.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        dog.kill()
        dog.wait(timeout=5)
        log.close()
        sa.timings["stop_s"] = round(time.time() - t, 1)

    atexit.register(stop)
    try:
        deadline = time.time() + HEALTHY_TIMEOUT
        while True:
            assert sa.proc.poll() is None, f"standalone exited {sa.proc.returncode}:\n{sa.log_tail()}"
            try:
                h = httpx.get(sa.base + "/api/v2/monitor/health", timeout=5).json()
                if all(h.get(k, {}).get("status") == "healthy"
                       for k in ("metadatabase", "scheduler", "triggerer", "dag_processor")):
                    break
            except (httpx.HTTPError, ValueError):
                pass
            assert time.time() < deadline, f"standalone not healthy in {HEALTHY_TIMEOUT}s:\n{sa.log_tail()}"
            time.sleep(1)
        sa.timings["healthy_s"] = round(time.time() - t0, 1)
        passwords = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())
        assert passwords == sa.passwords, sorted(passwords)
        sa.token = sa.token_of("admin")
        r = sa.request("POST", "/api/v2/pools", {"name": "seglake_spark", "slots": 1,
                                                 "description": "seglake SparkSubmit tasks"})
        assert r.status_code in (200, 201, 409), r.text
        deadline = time.time() + PARSE_TIMEOUT
        while True:
            r = sa.request("GET", "/api/v2/dags?limit=100&tags=seglake")
            have = {d["dag_id"] for d in r.json().get("dags", [])} if r.status_code == 200 else set()
            if set(DAG_IDS) <= have:
                break
            assert time.time() < deadline, f"DAGs not parsed in {PARSE_TIMEOUT}s (have {sorted(have)}):\n{sa.log_tail()}"
            time.sleep(0.5)
        sa.timings["dags_parsed_s"] = round(time.time() - t0, 1)
        yield sa
    finally:
        stop()
        atexit.unregister(stop)
        assert not _marked_pids(sa.marker), "processes of the standalone session survived the stop"
        sa.timings["total_s"] = round(time.time() - t0, 1)


@pytest.fixture(scope="session")
def standalone(etcd_server):
    """The session's `airflow standalone` (see launch): the project's defaults (no GC schedule)."""
    with launch(etcd_server) as sa:
        yield sa
    (ARTIFACTS / "e2e-timings.json").write_text(json.dumps(sa.timings, indent=2))
    print(f"\ne2e timings: {json.dumps(sa.timings)} (also in {ARTIFACTS / 'e2e-timings.json'})")


@pytest.fixture
def browser(standalone):
    """The admin's browser (pages.logged_in)."""
    from pages import logged_in

    with logged_in(standalone) as b:
        yield b


def pytest_terminal_summary(terminalreporter):
    """The e2e timings and the screenshot's path, in every run's summary (prints inside
    tests are captured when they pass)."""
    timings, shot = ARTIFACTS / "e2e-timings.json", ARTIFACTS / "seglake-page.png"
    if not any(r.nodeid.startswith("tests/e2e/") for k in ("passed", "failed", "error")
               for r in terminalreporter.stats.get(k, [])):
        return
    terminalreporter.section("seglake e2e")
    if timings.exists():
        terminalreporter.write_line(f"e2e timings (s): {timings.read_text().strip()}")
    terminalreporter.write_line(f"seglake page screenshot: {shot if shot.exists() else 'not taken'}")
