"""Shared fixtures: real servers on loopback, started by the tests, stopped at the end.

- `etcd_server` (session): a real etcd with its data in a temp dir.
- `s3_server` (session): a real SeaweedFS S3 server (`weed mini`), with a bucket.
- `settings` / `meta` / `store`: a fresh etcd root prefix and store per test, so tests
  never see each other's records.
- `airflow_env` (session): a private AIRFLOW_HOME (SQLite, migrated once), connections
  and the seglake Variable given through AIRFLOW_CONN_* / AIRFLOW_VAR_* pointing at the
  test servers.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from airflow_fixtures import sync_once
from engine_fixtures import engine_fixtures

REPO = Path(__file__).resolve().parents[1]
# Under pytest-xdist (`make test` runs two workers) each worker has its own home (its
# own Airflow SQLite, migrated once per worker) and its own session servers.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
TEST_HOME = REPO / ".dev" / "test" / WORKER if WORKER else REPO / ".dev" / "test"
HEAVY_LAYERS = ("cluster", "e2e")   # each a unit: one worker runs its files one after another
sys.path.insert(0, str(REPO / "plugins"))
# helpers shared by the tests of a layer (wal_helpers, ...), for tests in its subfolders too
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "spark" / "jobs"))
# the test Airflow's cluster policy (short sensor pokes): on the path before Airflow is imported
sys.path.insert(0, str(REPO / "tests" / "airflow_policy"))

# Throwaway servers' files on tmpfs where there is one (the tests of durability start
# their own servers, on disk): a write that waits for an fsync costs a disk round trip
# there and nothing on tmpfs. Still the real etcd and the real SQLite.
SHM = Path("/dev/shm")
RAM = SHM.is_dir() and os.access(SHM, os.W_OK)


def _ram_dir(name: str) -> Path | None:
    """A fresh directory on tmpfs (/dev/shm), or None where there is none."""
    return Path(tempfile.mkdtemp(prefix=f"seglake-test-{name}-", dir=SHM)) if RAM else None


# The test Airflow's metadata DB (SQLite): every execution-API call of a dag.test() task
# commits (~110 per run of the gc DAG), and a commit waits for fsyncs (two gc runs: 279
# fdatasyncs, 0.50 s on a disk at ~2 ms per fsync, 0.007 s on tmpfs; a slower disk
# pays in proportion). One DB per clone and worker
# (other checkouts' runs on this machine have their own), kept across runs like the
# home it belongs to (migrated again after a reboot empties tmpfs).
_CLONE = hashlib.sha1(str(REPO).encode()).hexdigest()[:10]
AIRFLOW_DB = (SHM / f"seglake-test-{_CLONE}" / (WORKER or "main") / "airflow.db" if RAM
              else TEST_HOME / "airflow" / "airflow.db")

# Airflow reads its configuration at import: fix it before any test imports airflow.
os.environ["AIRFLOW_HOME"] = str(TEST_HOME / "airflow")
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{AIRFLOW_DB}"
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"] = "seglake_airflow.airflow_db.CONNECT_ARGS"   # 60 s busy wait
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC"] = "seglake_airflow.airflow_db.CONNECT_ARGS_ASYNC"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "WARNING"
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
# Every Spark driver JVM the tests start (spark-submit, local master: the executors too):
# the C1 JIT only and the serial GC. The tests' jobs are seconds long on 2 cores, where
# C2 compiler threads and a parallel GC cost more start-up CPU than they return. Same
# spark-submit, same jobs; a developer's own SPARK_SUBMIT_OPTS wins.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
# ... and Spark's classes from a class-data-sharing archive (CDS, a JVM feature: the same
# classes, mapped from a file instead of parsed and verified again): a Spark JVM's start-up
# and a small job took 7.6 s of CPU with it, 12 s without, here; Spark JVMs were ~30 % of
# the suite's CPU. Made once per JVM + pyspark version (spark_cds_archive, in the session's
# first process; the workers inherit the option), used where the classpath matches (local
# mode; a mismatch is ignored by the JVM), its JVM log lines on stderr, never on stdout.
SPARK_CDS_JOB = REPO / "tests" / "spark_cds_job.py"
os.environ["PATH"] = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
for k in list(os.environ):  # the developer's own seglake settings must not leak in
    if k.startswith("SEGLAKE_") and k != "SEGLAKE_HOME":
        del os.environ[k]


_LAYER_S: dict[str, float] = {}
_UNIT_S: dict[str, float] = {}     # per xdist unit (scope_of): what LONG_FIRST and the Milvus halves balance
_LAYER_CPU: dict[str, float] = {}
_TEST_CPU: dict[str, float] = {}   # per test: the worker's own CPU (children: reaped late, in other tests)
_CPU_MARK = [0.0, 0.0]   # (the worker's own CPU, its reaped children's) at the last phase's end


def spark_cds_archive() -> Path | None:
    """The class-data-sharing archive of a Spark JVM (.dev/spark-cds/), made by running
    SPARK_CDS_JOB once with -XX:ArchiveClassesAtExit when missing; None when it cannot be
    made (no Java, no pyspark): the tests run without it."""
    try:
        import pyspark

        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
        key = hashlib.sha1((java.stderr + pyspark.__version__ + sys.version).encode()).hexdigest()[:12]
        path = REPO / ".dev" / "spark-cds" / f"spark-{key}.jsa"
        if path.exists():
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{os.environ['SPARK_SUBMIT_OPTS']} "
                                                  f"-XX:ArchiveClassesAtExit={tmp} -Xlog:disable -Xlog:all=warning:stderr"}
        subprocess.run([str(Path(sys.executable).parent / "spark-submit"), str(SPARK_CDS_JOB)], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=True)
        os.replace(tmp, path)
        return path
    except (OSError, subprocess.SubprocessError, ImportError):
        return None


def pytest_configure(config):
    if WORKER or "SharedArchiveFile" in os.environ["SPARK_SUBMIT_OPTS"]:
        return      # a worker inherits the option from the session's first process
    archive = spark_cds_archive()
    if archive is not None:
        os.environ["SPARK_SUBMIT_OPTS"] += f" -XX:SharedArchiveFile={archive} -Xlog:disable -Xlog:all=warning:stderr"


def _layer(nodeid: str) -> str:
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


# Scopes that run one after another on one worker, because their tests share a costly
# per-worker server: the 3-member cluster, the `airflow standalone` (+ Chromium), and the
# session Milvus (~200 MiB; its layer split in two halves, each one Milvus).
MILVUS_FIRST_HALF = ("test_milvus_restore.py", "test_milvus_server.py", "test_milvus_meta.py",
                     "test_milvus_schemas_attack.py")
# Milvus test files whose tests use only a Milvus of their own (not the worker's): a unit each
MILVUS_OWN_SERVER = ("test_milvus_attack5.py",)
# The longest units first (measured with `make test`'s --durations; only the order of the
# work depends on it, never a result): a long unit started last would run alone at the end.
# (Measured, 2 cores, stop 39's make test: e2e 862 s, test_milvus_attack5.py 791 -- started
# last, it ran alone for its last ~10 minutes --, milvus-2 768, milvus-1 737, cluster 598.)
LONG_FIRST = ("e2e", "tests/milvus/test_milvus_attack5.py", "milvus-2", "milvus-1", "cluster",
              "tests/integration/lifecycle/gc/test_gc_distributed_mark.py", "tests/faults/test_wal_kill_loop.py",
              "tests/integration/lifecycle/compaction/test_attack_compaction3.py", "tests/dags/test_gc_dag.py",
              "tests/integration/lifecycle/pitr/test_attack_cross.py", "tests/dags/test_restore_dags.py",
              "tests/dags/test_undrop_and_database_dags.py", "tests/dags/test_wal_flush_dag.py",
              "tests/integration/lifecycle/flush/test_flush_drop_meets_open_txn.py", "tests/dags/test_backup_dags.py")


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to under xdist (see pytest_xdist_make_scheduler)."""
    layer = _layer(nodeid)
    if layer in HEAVY_LAYERS:
        return layer
    if layer == "milvus":
        name = nodeid.split("::")[0].rsplit("/", 1)[-1]
        if name in MILVUS_OWN_SERVER:
            return nodeid.split("::")[0]
        return "milvus-1" if name in MILVUS_FIRST_HALF else "milvus-2"
    return nodeid.split("::")[0]


def pytest_xdist_make_scheduler(config, log):
    """Scheduling under pytest-xdist (`make test`): a test file's tests stay on one worker
    (its module fixtures are built once); the layers whose tests share a costly server
    (a 3-member cluster, an `airflow standalone`, a Milvus) are a unit each, run on one
    worker; the longest units start first (LONG_FIRST), the rest as xdist orders them.
    (xdist's own --dist loadgroup cannot do this on pytest 9.)"""
    from xdist.scheduler import LoadScopeScheduling

    rank = {s: i for i, s in enumerate(LONG_FIRST)}

    class LayerScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            first = min(self.workqueue, key=lambda s: rank.get(s, len(rank)))   # ties: xdist's order
            self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return LayerScheduling(config, log)


def _cpu_now() -> tuple[float, float]:
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """CPU seconds per phase (the suite is CPU-bound on 2 cores: this, not wall time, says
    where a minute of `make test` goes). A server a worker keeps for the session is counted
    when it is reaped, at the end, in no test. The servers and other processes outside the
    workers: sample them by process (what the README's figures come from)."""
    outcome = yield
    own, kids = _cpu_now()
    d_own, d_kids = (own - _CPU_MARK[0], kids - _CPU_MARK[1]) if _CPU_MARK[0] else (0.0, 0.0)
    _CPU_MARK[:] = [own, kids]
    # a child is counted when it is reaped, and Python's subprocess reaps a finished child lazily
    # (at the next Popen): a session server or a killed Milvus is charged to whichever test reaps
    # it. The per-test and per-file lists show the worker's own CPU; the layers count both.
    outcome.get_result().user_properties.extend([("cpu_s", d_own + d_kids), ("own_cpu_s", d_own)])


def pytest_runtest_logreport(report):
    """Time per layer (tests/<layer>/), setup + call + teardown, for the summary (summed
    over workers under xdist: it is test time, not wall time)."""
    layer = _layer(report.nodeid)
    _LAYER_S[layer] = _LAYER_S.get(layer, 0.0) + report.duration
    unit = scope_of(report.nodeid)
    _UNIT_S[unit] = _UNIT_S.get(unit, 0.0) + report.duration
    cpu = sum(v for k, v in report.user_properties if k == "cpu_s")
    _LAYER_CPU[layer] = _LAYER_CPU.get(layer, 0.0) + cpu
    own = sum(v for k, v in report.user_properties if k == "own_cpu_s")
    _TEST_CPU[report.nodeid] = _TEST_CPU.get(report.nodeid, 0.0) + own


def pytest_terminal_summary(terminalreporter):
    if _LAYER_S:
        terminalreporter.write_line("seglake time per layer (s, setup+call+teardown): " + ", ".join(
            f"{k} {v:.1f}" for k, v in sorted(_LAYER_S.items())) + f"; total {sum(_LAYER_S.values()):.1f}")
        longest = sorted(_UNIT_S.items(), key=lambda kv: -kv[1])[:30]
        terminalreporter.write_line("seglake longest units (s; a unit runs on one worker): " + ", ".join(
            f"{k.rsplit('/', 1)[-1]} {v:.0f}" for k, v in longest))
        terminalreporter.write_line("seglake CPU per layer (s, worker + reaped children): " + ", ".join(
            f"{k} {v:.0f}" for k, v in sorted(_LAYER_CPU.items())) + f"; total {sum(_LAYER_CPU.values()):.0f}")
        files: dict[str, float] = {}
        for k, v in _TEST_CPU.items():
            files[k.split("::")[0]] = files.get(k.split("::")[0], 0.0) + v
        for what, table in (("files", files), ("tests", _TEST_CPU)):
            terminalreporter.write_line(f"seglake most CPU {what} (s, the worker's own): " + ", ".join(
                f"{k} {v:.0f}" for k, v in sorted(table.items(), key=lambda kv: -kv[1])[:25]))


@pytest.fixture(scope="session")
def test_home():
    TEST_HOME.mkdir(parents=True, exist_ok=True)
    return TEST_HOME


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory):
    """The worker's etcd. Its data dir is on tmpfs where there is one: every etcd write
    waits for an fsync of its WAL (500 sequential puts: 0.58 s with the data dir on
    disk, 0.27 s on tmpfs, here; a slower disk pays in proportion), and this
    throwaway server is never killed -- the tests of etcd's durability start their own,
    on disk (tests/faults: `etcd`, tests/cluster). Still a real etcd (3.4: no
    --unsafe-no-fsync flag; on tmpfs an fsync returns at once)."""
    from seglake.dev.devstack import EtcdServer

    state = _ram_dir("etcd") or tmp_path_factory.mktemp("etcd")
    server = EtcdServer(state_dir=state).start(timeout=20)
    yield server
    server.stop()
    if state.parent == SHM:
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    from seglake.dev.devstack import WeedServer

    server = WeedServer(state_dir=tmp_path_factory.mktemp("weed")).start(timeout=60)
    yield server
    # a throwaway server: SIGKILL after 3 s (its graceful stop took ~12 s after a Milvus had
    # used it, at the end of every worker)
    server.stop(timeout=3)


def _s3_settings(server, prefix: str):
    from seglake.config import Settings

    return Settings.from_dict({
        "store_uri": f"s3://seglake-test/{prefix}", "s3_endpoint": server.endpoint,
        "s3_access_key": server.access_key, "s3_secret_key": server.secret_key})


@pytest.fixture
def root_prefix():
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def settings(etcd_server, tmp_path, root_prefix):
    from seglake.config import Settings

    return Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": root_prefix,
                               "store_uri": str(tmp_path / "store"), "etcd_timeout": 5})


meta, store = engine_fixtures("settings", "meta", "store")


@pytest.fixture
def s3_store_settings(s3_server, root_prefix):
    """Settings whose store is the test's prefix of the SeaweedFS bucket (no etcd)."""
    return _s3_settings(s3_server, root_prefix)


@pytest.fixture
def s3_store(s3_store_settings):
    from seglake.storage import open_store

    s = open_store(s3_store_settings)
    s.ensure_bucket()
    return s


@pytest.fixture(params=["local", "s3"])
def any_store(request, tmp_path):
    """The Store contract runs against both backends."""
    if request.param == "local":
        from seglake.storage.local import LocalStore
        return LocalStore(tmp_path / "contract")
    return request.getfixturevalue("s3_store")


@pytest.fixture(scope="session")
def airflow_home(test_home):
    """A private Airflow home, migrated once per session (SQLite). While it is in use,
    dag.test() skips re-syncing a bundle identical to its last sync (airflow_fixtures)."""
    home = Path(os.environ["AIRFLOW_HOME"])
    marker = AIRFLOW_DB.with_suffix(".migrated")   # beside the DB: tmpfs may have lost it
    if not marker.exists():
        shutil.rmtree(home, ignore_errors=True)
        AIRFLOW_DB.unlink(missing_ok=True)
        home.mkdir(parents=True)
        AIRFLOW_DB.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                       stdout=subprocess.DEVNULL, env=os.environ.copy(), timeout=300)
        marker.touch()
    from airflow.dag_processing import dagbag

    real = dagbag.sync_bag_to_db
    dagbag.sync_bag_to_db = sync_once(real)
    yield home
    dagbag.sync_bag_to_db = real


@pytest.fixture
def airflow_env(airflow_home, settings, monkeypatch):
    """Connections and the seglake Variable for one test, through Airflow's env secrets."""
    host, _, port = settings.etcd_endpoint.rpartition(":")
    monkeypatch.setenv("AIRFLOW_CONN_ETCD_DEFAULT", json.dumps(
        {"conn_type": "etcd", "host": host, "port": int(port), "extra": {"root": settings.etcd_root}}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(
        {"conn_type": "spark", "host": "local[2]", "extra": {"deploy-mode": "client"}}))
    monkeypatch.setenv("AIRFLOW_VAR_SEGLAKE_CONFIG", json.dumps({"store_uri": settings.store_uri}))
    return settings
