"""One typed settings object for the whole engine.

One file on purpose (~470 lines): the settings contract is one table (every key, its
default, its check and its source) and the loader that applies it layer by layer.

Layers, later wins:
  1. engine defaults (below)
  2. environment: SEGLAKE_CONFIG (a JSON object), SEGLAKE_SECRETS_FILE (a JSON file of
     secrets), then SEGLAKE_<KEY> per key
  3. the Airflow Variable `seglake_config` (JSON), passed in by the Airflow glue
  4. explicit overrides (a DAG's params, a CLI flag)

Every layer goes through the same validation, before anything uses a value: unknown
keys (a JSON key or a SEGLAKE_* variable) raise ConfigError naming the closest known
key; wrong types, NaN/Infinity and numbers outside seglake.limits raise it naming the
key. Secrets (etcd password, S3 secret key) are read like any other key but never appear
in repr(), to_public(), an error message or Spark argv; SEGLAKE_SECRETS_FILE names a
JSON file of them (how the Spark operator hands them over where env becomes argv).

`gc_schedule` is read when the gc DAG file is parsed, where only the environment is
available (no Variable: no network at parse time), so the Variable may not set it. It
defaults to `none`: GC runs on a schedule only when an operator asks for one, and a
scheduled run does only what `seglake gc schedule set` recorded.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from seglake.errors import ConfigError, ValidationError
from seglake.limits import LIMITS, YEAR, Limit
from seglake.names import parse_endpoints

ENV_PREFIX = "SEGLAKE_"
ENV_JSON = "SEGLAKE_CONFIG"
ENV_SECRETS_FILE = "SEGLAKE_SECRETS_FILE"
VARIABLE_NAME = "seglake_config"
# SEGLAKE_* variables that are not settings keys (read by devstack/config and faults.py)
ENV_OTHER = frozenset({ENV_JSON, ENV_SECRETS_FILE, "SEGLAKE_HOME", "SEGLAKE_FAULTS", "SEGLAKE_SPARK_LOG_LEVEL",
                       "SEGLAKE_BENCH_DIR", "SEGLAKE_BENCH_SPARK_MASTER"})

# The repository root when installed editable (include/seglake/config.py -> repo).
_REPO = Path(__file__).resolve().parents[2]
DEFAULT_HOME = Path(os.environ.get("SEGLAKE_HOME", _REPO / ".dev"))

# plain decimal (ASCII digits, no sign, exponent, leading zero or padding) and a unit
_DURATION_RE = re.compile(r"((?:0|[1-9][0-9]*)(?:\.[0-9]+)?)(ms|s|m|h|d)?", re.ASCII)
_ANY_DURATION = Limit(0.0, 10 * YEAR, unit="s")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(key: str, value: Any, limit: Limit | None = None) -> float:
    """Seconds from a number or a string like '90', '10m', '3h', '1d', checked against
    `limit` (a settings key's own Limit; any duration up to 10 years without one)."""
    if isinstance(value, bool):
        raise ConfigError(f"config key {key!r}: expected a duration, got a boolean")
    if isinstance(value, (int, float)):
        seconds = value
    elif isinstance(value, str):
        m = _DURATION_RE.fullmatch(value)
        if not m:
            raise ConfigError(f"config key {key!r}: {value!r} is not a duration: plain decimal digits and an "
                              "optional unit ms, s, m, h or d (e.g. 600, '10m', '1.5h'); no sign, exponent "
                              "or leading zero")
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise ConfigError(f"config key {key!r}: expected a duration, got {type(value).__name__}")
    return _in_range(key, seconds, limit or LIMITS.get(key, _ANY_DURATION))


def _in_range(key: str, value: Any, limit: Limit) -> Any:
    """The seglake.limits check of a numeric config key, as a ConfigError."""
    try:
        return limit.check(f"config key {key!r}", value)
    except ValidationError as e:
        raise ConfigError(str(e)) from None


def _duration(default: float, doc: str):
    return field(default=default, metadata={"kind": "duration", "doc": doc})


def _int(default: int, doc: str):
    return field(default=default, metadata={"kind": "int", "doc": doc})


def _str(default: str, doc: str, secret: bool = False, env_only: bool = False):
    return field(default=default, metadata={"kind": "str", "secret": secret, "env_only": env_only, "doc": doc})


def _float(default: float, doc: str):
    return field(default=default, metadata={"kind": "float", "doc": doc})


def _bool(default: bool, doc: str):
    return field(default=default, metadata={"kind": "bool", "doc": doc})


@dataclass(frozen=True)
class Settings:
    # object storage
    store_uri: str = _str(str(DEFAULT_HOME / "store"), "local directory or s3://bucket/prefix")
    s3_endpoint: str = _str("", "S3 endpoint URL (empty: AWS default)")
    s3_region: str = _str("us-east-1", "S3 region")
    s3_access_key: str = _str("", "S3 access key id (empty: boto3 default chain)")
    s3_secret_key: str = _str("", "S3 secret access key", secret=True)
    # backup target (snapshot export / restore from a bundle): another store, own credentials
    backup_uri: str = _str("", "backup target: local directory or s3://bucket/prefix (empty: none); never "
                               "the store itself")
    backup_s3_endpoint: str = _str("", "S3 endpoint URL of the backup target (empty: AWS default)")
    backup_s3_region: str = _str("us-east-1", "S3 region of the backup target")
    backup_s3_access_key: str = _str("", "S3 access key id of the backup target (empty: boto3 default chain)")
    backup_s3_secret_key: str = _str("", "S3 secret access key of the backup target", secret=True)
    # a Milvus's bucket, read (GET/LIST only) by `seglake milvus backup`: its own credentials
    milvus_s3_endpoint: str = _str("", "S3 endpoint URL of the Milvus bucket a capture reads (empty: AWS default)")
    milvus_s3_region: str = _str("us-east-1", "S3 region of the Milvus bucket a capture reads")
    milvus_s3_access_key: str = _str("", "S3 access key id for the Milvus bucket (empty: boto3 default chain)")
    milvus_s3_secret_key: str = _str("", "S3 secret access key for the Milvus bucket", secret=True)
    # etcd
    etcd_endpoint: str = _str("127.0.0.1:23790", "etcd host:port")
    etcd_root: str = _str("seglake", "root prefix of every seglake key in etcd")
    etcd_user: str = _str("", "etcd user (empty: no auth)")
    etcd_password: str = _str("", "etcd password", secret=True)
    etcd_ca_cert: str = _str("", "CA certificate file for etcd TLS")
    etcd_timeout: float = _duration(10.0, "per-request etcd timeout")
    etcd_retries: int = _int(4, "retries on an unavailable etcd before giving up")
    # the Milvus a `seglake milvus restore` writes into (its bucket: the milvus_s3_* keys)
    milvus_password: str = _str("", "password of the target Milvus's user (milvus restore --user)", secret=True)
    # lifecycle tolerances and retention
    missing_tolerance: float = _duration(86400.0, "orphan files younger than this are kept")
    drop_tolerance: float = _duration(10800.0, "files of dropped segments are kept this long")
    copy_job_retention: float = _duration(10800.0, "finished copy jobs are kept this long")
    snapshot_pending_timeout: float = _duration(600.0, "PENDING snapshots older than this are stale")
    copy_job_timeout: float = _duration(3600.0, "default restore timeout: a copy job still running after this fails")
    tolerance_floor: float = _duration(3600.0, "GC tolerances below this need force=true")
    # work sizing
    max_segments_per_task: int = _int(10, "segment mappings per copy task")
    inline_threshold_bytes: int = _int(256 << 20, "engine=auto runs inline below this many bytes")
    snapshot_inline_max_segments: int = _int(20000, "engine=auto writes manifests inline below this many segments")
    segments_per_manifest: int = _int(2000, "segments per snapshot manifest file")
    gc_inline_max_files: int = _int(2_000_000, "engine=auto marks inline below this many referenced files")
    gc_list_threads: int = _int(4, "parallel listings of an inline GC mark of an S3 store (cut into units as on "
                                      "Spark); a local directory is listed by one thread")
    id_block_size: int = _int(10000, "ids reserved per allocator round trip")
    max_clock_skew: float = _duration(5.0, "the most a timestamp may run ahead of this process's clock: a "
                                      "process refuses to issue one (or to move the TSO past one) "
                                      "further ahead, e.g. after a writer with a fast clock moved the TSO")
    copy_threads: int = _int(8, "parallel file copies per worker")
    gc_schedule: str = _str("none", "schedule of the gc DAG: a cron expression, an @preset or none (manual "
                                    "only); environment only: read at DAG parse time. A scheduled run also "
                                    "needs `seglake gc schedule set`", env_only=True)
    retention_schedule: str = _str("@hourly", "schedule of the snapshot_schedule DAG (retention policies; "
                                   "environment only: read at DAG parse time)", env_only=True)
    spark_ui: bool = _bool(False, "enable the Spark UI for SparkSubmit jobs")
    # write-ahead log
    wal_fragment_bytes: int = _int(8 << 20, "a WAL fragment is closed at this many bytes")
    wal_fragment_records: int = _int(10000, "a WAL fragment is closed at this many records")
    wal_batch_time: float = _duration(0.002, "a WAL writer waits this long to batch appends into one fragment")
    wal_txn_keepalive: float = _duration(60.0, "a WAL transaction expires this long after its last message")
    wal_producer_expiry: float = _duration(86400.0, "the retry window of a named WAL producer id: its records (the "
                                           "calls that make its retries idempotent) live on an etcd lease at "
                                           "least this long after its last commit (at most twice); a retry "
                                           "older than that is refused")
    wal_scanner_startup_delay: float = _duration(0.0, "a consuming WAL scanner waits this long before it starts")
    wal_pause_poll: float = _duration(1.0, "how often a paused WAL scanner re-reads the pause flag")
    # WAL flusher (seal policies of growing segments; see lifecycle/flush.py)
    flush_seal_rows: int = _int(1_000_000, "a growing segment is sealed at this many rows")
    flush_seal_bytes: int = _int(256 << 20, "a growing segment is sealed at this many buffered bytes")
    flush_seal_age: float = _duration(600.0, "a growing segment is sealed this long after its first row")
    flush_seal_idle: float = _duration(60.0, "a growing segment is sealed after this long without a new row")
    # compaction (lifecycle/compaction)
    compaction_min_segment_rows: int = _int(100_000, "a Flushed segment below this many rows is merged with "
                                            "its partition's other small segments")
    compaction_target_rows: int = _int(1_000_000, "merged segments hold about this many visible rows")
    compaction_delete_ratio: float = _float(0.2, "a segment whose deleted fraction of rows exceeds this is "
                                           "rewritten alone (0..1)")
    compaction_protection: float = _duration(3600.0, "a collection snapshotted by hand within this long is "
                                             "not compacted (Milvus's compaction_protection_seconds; a "
                                             "retention schedule's snapshots do not protect)")
    compaction_min_segment_bytes: int = _int(0, "a Flushed segment below this many stored bytes is merged "
                                             "too (0: by rows only)")
    compaction_target_bytes: int = _int(1 << 30, "merged segments hold about this many bytes (whichever of "
                                        "target rows / bytes comes first)")
    compaction_l0_age: float = _duration(3600.0, "collection-wide delete logs (L0 segments) older than this are "
                                         "folded into the segments they hit")
    compaction_schedule: str = _str("none", "schedule of the compaction DAG (cron or @hourly; 'none': manual only); a "
                                    "scheduled run compacts every collection whose policy says scheduled")
    wal_flush_schedule: str = _str("*/5 * * * *", "schedule of the wal_flush DAG (e.g. @continuous)")
    wal_archive_schedule: str = _str("*/5 * * * *", "schedule of the wal_archive DAG (continuous backup of the "
                                     "WAL of collections whose retention policy says archive; each run ships "
                                     "for up to its `seconds`), or none")

    # -- construction -------------------------------------------------------------
    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def load(
        cls,
        variable: str | Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> "Settings":
        """Defaults <- environment <- Airflow Variable JSON <- explicit overrides. A refusal
        never carries a secret value given in any layer (a secret pasted into the wrong key
        of another layer is masked too)."""
        env = os.environ if env is None else env
        try:
            return cls._load(variable, overrides, env)
        except ConfigError as e:
            raise _masked(e, _raw_secrets(env, variable, overrides)) from None

    @classmethod
    def _load(cls, variable, overrides, env) -> "Settings":
        merged = cls.from_env(env, validate=False)
        cls.from_dict(merged)  # each layer is checked whole: a later layer never masks a bad value
        if variable:
            values = _parse_json(f"Variable {VARIABLE_NAME}", variable)
            env_only = sorted(set(values) & _ENV_ONLY)
            if env_only:
                raise ConfigError(f"config key {env_only[0]!r} cannot come from the Variable {VARIABLE_NAME}: it is "
                                  "read when the DAG file is parsed, where no Variable is read; set "
                                  f"{ENV_PREFIX}{env_only[0].upper()} in the environment instead")
            cls.from_dict(values)
            merged.update(values)
        if overrides:
            merged.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(merged)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, validate: bool = True) -> Any:
        """The environment layer: SEGLAKE_CONFIG, then SEGLAKE_SECRETS_FILE, then one
        SEGLAKE_<KEY> per key. A SEGLAKE_* variable that is neither a key nor one of
        ENV_OTHER is refused, naming the closest known one (a misspelt variable would
        otherwise be ignored silently). Returns Settings, or the raw dict (validate=False)."""
        env = os.environ if env is None else env
        known = {ENV_PREFIX + f.name.upper(): f for f in fields(cls)}
        _check_env_names(env, [*known, *ENV_OTHER])
        merged: dict[str, Any] = {}
        if env.get(ENV_JSON):
            merged.update(_parse_json(ENV_JSON, env[ENV_JSON]))
        if env.get(ENV_SECRETS_FILE):
            merged.update(_read_secrets_file(env[ENV_SECRETS_FILE]))
        for name, f in known.items():
            if name in env:
                merged[f.name] = _from_env_string(f, env[name])
        return cls.from_dict(merged) if validate else merged

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "Settings":
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known), key=str)
        try:
            if unknown:
                raise ConfigError(f"unknown config key {unknown[0]!r}{_closest(str(unknown[0]), list(known))}")
            return cls(**{k: _coerce(known[k], v) for k, v in values.items()})
        except ConfigError as e:   # a secret given in the wrong key is echoed by that key's refusal
            raise _masked(e, [values.get(k) for k in _SECRET_KEYS]) from None

    def replace(self, **changes: Any) -> "Settings":
        return self.from_dict({**self.to_dict(secrets=True), **changes})

    # -- export -------------------------------------------------------------------
    def to_dict(self, secrets: bool = False) -> dict[str, Any]:
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if secrets or not f.metadata.get("secret")
        }

    def to_public(self) -> dict[str, Any]:
        """What may be logged, shown or put in XCom: secrets reduced to set/unset."""
        out = self.to_dict(secrets=False)
        for f in fields(self):
            if f.metadata.get("secret"):
                out[f.name] = "***" if getattr(self, f.name) else ""
        return out

    def to_env(self) -> dict[str, str]:
        """Environment for a child process (spark-submit, executors): no argv exposure."""
        env = {ENV_JSON: json.dumps(self.to_dict(secrets=False))}
        env.update(self.secrets_env())
        return env

    def secrets_env(self) -> dict[str, str]:
        """SEGLAKE_<KEY> for every secret that is set (values: handle with care)."""
        return {ENV_PREFIX + f.name.upper(): getattr(self, f.name)
                for f in fields(self) if f.metadata.get("secret") and getattr(self, f.name)}

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.to_public().items())
        return f"Settings({inner})"

    @property
    def is_s3(self) -> bool:
        return self.store_uri.startswith("s3://")


_ENV_ONLY = frozenset(f.name for f in fields(Settings) if f.metadata.get("env_only"))
_SECRET_KEYS = tuple(f.name for f in fields(Settings) if f.metadata.get("secret"))


def _raw_secrets(env: Mapping[str, str], variable, overrides) -> list:
    """Every secret value given to Settings.load, read without validating the layers (one
    of them failed): SEGLAKE_<SECRET> variables, SEGLAKE_CONFIG, the secrets file, the
    Variable, the overrides."""
    out: list = [env.get(ENV_PREFIX + k.upper()) for k in _SECRET_KEYS]
    docs: list = [overrides or {}, variable if isinstance(variable, Mapping) else None]
    for text in (env.get(ENV_JSON), variable if isinstance(variable, (str, bytes)) else None):
        try:
            docs.append(json.loads(text) if text else None)
        except (ValueError, RecursionError):
            pass
    if env.get(ENV_SECRETS_FILE):
        try:
            with open(env[ENV_SECRETS_FILE], "rb") as fh:
                docs.append(json.loads(fh.read()))
        except (OSError, ValueError, RecursionError):
            pass
    for doc in docs:
        if isinstance(doc, Mapping):
            out += [doc.get(k) for k in _SECRET_KEYS]
    return out


def _masked(e: ConfigError, secrets: list) -> ConfigError:
    """`e` with every secret value in `secrets` (as given and as repr() shows it) replaced by ***."""
    text = str(e)
    shown = {s for v in secrets if isinstance(v, str) and v for s in (v, repr(v)[1:-1], json.dumps(v)[1:-1])}
    for s in sorted(shown, key=len, reverse=True):   # longest first: no partial leftovers
        text = text.replace(s, "***")
    return e if text == str(e) else ConfigError(text)
# etcd_root: every seglake key is f"{root}/..."; one clean path, no empty or dot-only segment
_ROOT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(?:/[A-Za-z0-9][A-Za-z0-9_.-]*)*")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")  # in no path, URI, endpoint or name a setting holds
_SCHEDULE_RE = re.compile(r"@(once|continuous|hourly|daily|weekly|monthly|quarterly|yearly|annually)|none|"
                          r"[0-9*/,\-A-Za-z?#LW]+( [0-9*/,\-A-Za-z?#LW]+){4,5}")


def _is_endpoint(value: str) -> bool:
    """An S3 endpoint botocore takes: http(s)://host[:port][/path], no credentials in it."""
    from urllib.parse import urlsplit

    try:
        u = urlsplit(value)
        port = u.port
    except ValueError:
        return False
    return (u.scheme in ("http", "https") and bool(u.hostname) and "@" not in u.netloc and not u.query
            and not u.fragment and (port is None or 0 < port < 65536) and value == value.strip())


def _is_schedule(value: str) -> bool:
    """'none', an Airflow @preset, or a cron expression Airflow's parser (croniter) takes:
    a DAG file whose schedule Airflow cannot parse is an import error, its DAG gone."""
    if not _SCHEDULE_RE.fullmatch(value):
        return False
    if value.startswith("@") or value == "none":
        return True
    try:
        from croniter import croniter
    except ImportError:          # an engine without Airflow: the pattern is all it can check
        return True
    return bool(croniter.is_valid(value))


def _check_env_names(env: Mapping[str, str], valid: list[str]) -> None:
    """Refuse a variable that looks like ours but is not read: SEGLAKE_* not a known name,
    or any other spelling of the prefix (`seglake_store_uri`, `Seglake_...`: environment
    names are case-sensitive, so it would be ignored silently). Names the closest one."""
    ours = sorted(n for n in env if n[:len(ENV_PREFIX)].upper() == ENV_PREFIX and n not in valid)
    if not ours:
        return
    name = ours[0]
    upper = {v.upper(): v for v in valid}
    if name.upper() in upper:
        raise ConfigError(f"environment variable {name!r} is not read: names are case-sensitive "
                          f"(did you mean {upper[name.upper()]!r}?)")
    raise ConfigError(f"unknown environment variable {name!r}{_closest(name.upper(), valid)}")


def _closest(key: str, candidates: list[str]) -> str:
    near = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else f"; known: {', '.join(sorted(candidates))}"


class _Refused(str):
    """A JSON number parsed into a marker, so the error can name the key that holds it."""
    why = ""


class _NonFinite(_Refused):
    why = "only finite numbers are allowed"       # NaN, Infinity, -Infinity, 1e400


class _NegativeZero(_Refused):
    why = "a negative zero; write 0"              # -0, -0.0, -0e5


class _DuplicateKey(Exception):
    pass


def _parse_float(text: str) -> Any:
    value = float(text)
    if not math.isfinite(value):
        return _NonFinite(text)
    return _NegativeZero(text) if value == 0 and text.startswith("-") else value


def _parse_int(text: str) -> Any:
    return _NegativeZero(text) if text.startswith("-") and int(text) == 0 else int(text)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _find_refused(data: Any, path: str) -> tuple[str, _Refused] | None:
    if isinstance(data, _Refused):
        return path, data
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        found = _find_refused(v, f"{path}.{k}" if path else str(k))
        if found:
            return found
    return None


def loads_strict(source: str, text: str | bytes) -> Any:
    """json.loads for everything seglake parses as input (config JSON, SEGLAKE_CONFIG,
    the Variable, the secrets file): refuses a key given twice in one object (Python's
    json keeps the last one silently), NaN, (-)Infinity, overflowing numbers and
    negative zeros (Python's json accepts them), naming the key."""
    try:
        data = json.loads(text, parse_constant=_NonFinite, parse_float=_parse_float, parse_int=_parse_int,
                          object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{source}: not valid JSON ({e.msg} at char {e.pos})") from None
    except ValueError as e:  # an integer past Python's digit limit
        raise ConfigError(f"{source}: a number is out of range ({str(e)[:60]})") from None
    except _DuplicateKey as e:
        raise ConfigError(f"{source}: key {e.args[0]!r} is given more than once; each key may appear once") \
            from None
    found = _find_refused(data, "")
    if found:
        where = f"key {found[0]!r}" if found[0] else "value"
        raise ConfigError(f"{source}: {where} is {found[1]}, {found[1].why}")
    return data


def duplicate_key(text: str | bytes) -> str | None:
    """The first key a JSON text gives twice in one object (at any depth), else None (also
    for a text that is not JSON: its parser says that). For the request doors (the REST
    API's bodies, a trigger's conf), whose parser keeps the last value silently: `{"name":
    "a", "name": "b"}` would act on "b"."""
    try:
        json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateKey as e:
        key = str(e.args[0])
        return key if len(key) <= 40 else key[:37] + "..."
    except (ValueError, RecursionError):
        return None
    return None


def _parse_json(source: str, value: str | Mapping[str, Any]) -> dict[str, Any]:
    data = dict(value) if isinstance(value, Mapping) else loads_strict(source, value)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: must be a JSON object, got {type(data).__name__}")
    return data


def _read_secrets_file(path: str) -> dict[str, Any]:
    """Secret keys from the JSON file SEGLAKE_SECRETS_FILE names; only secret keys allowed."""
    try:
        with open(path, "rb") as fh:
            data = _parse_json(ENV_SECRETS_FILE, fh.read())
    except OSError as e:
        raise ConfigError(f"{ENV_SECRETS_FILE}: cannot read {path!r} ({e.strerror})") from None
    secret = {f.name for f in fields(Settings) if f.metadata.get("secret")}
    other = sorted(set(data) - secret, key=str)
    if other:
        raise ConfigError(f"{ENV_SECRETS_FILE}: {other[0]!r} is not a secret key "
                          f"(allowed: {', '.join(sorted(secret))})")
    return data


def spark_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The SEGLAKE_* environment a Spark driver hands to its executors (in the task
    closure, never argv): a secrets file is resolved here, since executors on other
    hosts cannot read the driver's file."""
    env = os.environ if env is None else env
    out = {k: v for k, v in env.items() if k.startswith(ENV_PREFIX) and k != ENV_SECRETS_FILE}
    if env.get(ENV_SECRETS_FILE):
        out.update({ENV_PREFIX + k.upper(): v for k, v in _read_secrets_file(env[ENV_SECRETS_FILE]).items()})
    return out


def retention_schedule(env: Mapping[str, str] | None = None) -> str | None:
    """The snapshot_schedule DAG's schedule, like gc_schedule."""
    value = Settings.from_env(env).retention_schedule
    return None if value == "none" else value


def compaction_schedule(env: Mapping[str, str] | None = None) -> str | None:
    """The compaction DAG's schedule, like gc_schedule."""
    value = Settings.from_env(env).compaction_schedule
    return None if value == "none" else value


def gc_schedule(env: Mapping[str, str] | None = None) -> str | None:
    """The gc DAG's schedule from the environment alone (DAG parse time: no Variable,
    no network). Every SEGLAKE_* variable is checked on the way. 'none' -> None."""
    value = Settings.from_env(env).gc_schedule
    return None if value == "none" else value


def _from_env_string(f: dataclasses.Field, raw: str) -> Any:
    kind = f.metadata["kind"]
    if kind in ("int", "float"):  # plain decimal: int() would take '+3', '1_0', ' 3\n', '١٢', '-0'
        try:
            return LIMITS[f.name].parse(f"config key {f.name!r}", raw)
        except ValidationError as e:
            raise ConfigError(str(e)) from None
    if kind == "bool":
        low = raw.strip().lower()
        if low not in ("1", "0", "true", "false", "yes", "no"):
            raise ConfigError(f"config key {f.name!r}: {raw!r} is not a boolean")
        return low in ("1", "true", "yes")
    return raw


_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def _check_store_uri(value: str, key: str = "store_uri") -> None:
    """s3://bucket[/prefix] (full match, see storage.s3.parse_s3_uri), or an absolute
    local path (or ~/..., or file:///...) without '.' or '..' components: every process
    (scheduler, workers, Spark executors) must name the same store, so a relative path,
    which each resolves against its own working directory, is refused."""
    from seglake.errors import redact

    if isinstance(value, str) and redact(value) != value:   # never echoed back: it may be a key and secret
        raise ConfigError(f"config key '{key}': {redact(value)!r} carries user info before '@' (a credential?): "
                          "a location is s3://bucket/prefix or an absolute path; S3 credentials go in the "
                          "Airflow connection (aws_default) or the environment, never in the URI")
    try:
        _check_location(value, key)
    except ConfigError as e:   # the refusal names the value, never a credential it carried
        raise ConfigError(redact(str(e))) from None


def _check_location(value: str, key: str) -> None:
    # every door's location (config, a conf's or the REST API's backup_uri, a CLI --target)
    # comes here: a NUL crashed the path functions (HTTP 500, a traceback), a newline or an
    # escape made a directory of that name and went to logs and terminals as it was
    if not isinstance(value, str) or _CONTROL_RE.search(value):
        raise ConfigError(f"config key '{key}': {value!r} contains a control character (newline, tab, NUL...)"
                          if isinstance(value, str) else f"config key '{key}': expected a string, got {value!r}")
    if value[:5].lower() == "s3://":
        from seglake.storage.s3 import parse_s3_uri
        try:
            parse_s3_uri(value)
        except ValueError as e:
            raise ConfigError(f"config key '{key}': {e}") from None
        return
    path = value[len("file://"):] if value.startswith("file://") else value
    if _SCHEME_RE.match(path):
        raise ConfigError(f"config key '{key}': unsupported scheme in {value!r} (use s3://bucket/prefix "
                          "or an absolute path)")
    if not path.startswith(("/", "~/")) and path != "~":
        raise ConfigError(f"config key '{key}': {value!r} is not an absolute path (or s3://bucket/prefix): "
                          "a relative path names a different store in every working directory")
    if "\\" in path or any(p in (".", "..") for p in path.split("/")):
        raise ConfigError(f"config key '{key}': {value!r} has a '.', '..' or backslash component; "
                          "write the path it means")


def _coerce(f: dataclasses.Field, value: Any) -> Any:
    kind = f.metadata["kind"]
    if kind == "duration":  # every numeric settings key has its own Limit (LIMITS[...] fails loudly)
        return parse_duration(f.name, value, LIMITS[f.name])
    if kind in ("int", "float"):
        return _in_range(f.name, value, LIMITS[f.name])
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"config key {f.name!r}: expected true or false, got {value!r}")
        return value
    if not isinstance(value, str):
        shown = "(value not shown: secret)" if f.metadata.get("secret") else repr(value)
        raise ConfigError(f"config key {f.name!r}: expected a string, got {type(value).__name__} {shown}")
    if f.name.endswith("_schedule") and not _is_schedule(value):   # every DAG schedule key, one rule
        raise ConfigError(f"config key {f.name!r}: {value!r} is not a cron expression, an @preset or 'none'")
    if f.name.endswith("s3_endpoint") and value and not _is_endpoint(value):   # every S3 endpoint key
        shown = "(value not shown: it holds credentials)" if "@" in value else repr(value)
        raise ConfigError(f"config key {f.name!r}: {shown} is not an http:// or https:// URL with a host and no "
                          f"credentials (e.g. http://127.0.0.1:8333), or empty for AWS")
    if f.name == "store_uri":
        _check_store_uri(value)
    if f.name == "backup_uri" and value:
        _check_store_uri(value, "backup_uri")
    if f.name == "etcd_endpoint":
        try:
            parse_endpoints("config key 'etcd_endpoint'", value)
        except ValidationError as e:
            raise ConfigError(str(e)) from None
    if f.name == "etcd_root" and not _ROOT_RE.fullmatch(value):
        raise ConfigError(f"config key 'etcd_root': {value!r} is not a key prefix (path segments of letters, "
                          f"digits, '_', '.', '-', each starting with a letter or digit, joined by '/')")
    if not f.metadata.get("secret") and _CONTROL_RE.search(value):
        raise ConfigError(f"config key {f.name!r}: {value!r} contains a control character (newline, tab, NUL...)")
    return value
