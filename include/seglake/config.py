"""One typed settings object for the whole engine.

Layers, later wins:
  1. engine defaults (below)
  2. environment: SEGLAKE_CONFIG (a JSON object) then SEGLAKE_<KEY> per key
  3. the Airflow Variable `seglake_config` (JSON), passed in by the Airflow glue
  4. explicit overrides (a DAG's params, a CLI flag)

Every layer goes through the same validation: unknown keys, wrong types and negative
durations raise ConfigError naming the key. Secrets (etcd password, S3 secret key) are
read like any other key but never appear in repr(), to_public() or Spark argv.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from seglake.errors import ConfigError

ENV_PREFIX = "SEGLAKE_"
ENV_JSON = "SEGLAKE_CONFIG"
VARIABLE_NAME = "seglake_config"

# The repository root when installed editable (include/seglake/config.py -> repo).
_REPO = Path(__file__).resolve().parents[2]
DEFAULT_HOME = Path(os.environ.get("SEGLAKE_HOME", _REPO / ".dev"))

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(key: str, value: Any) -> float:
    """Seconds from a number or a string like '90', '10m', '3h', '1d'."""
    if isinstance(value, bool):
        raise ConfigError(f"config key {key!r}: expected a duration, got a boolean")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        m = _DURATION_RE.match(value)
        if not m:
            raise ConfigError(f"config key {key!r}: {value!r} is not a duration (e.g. 600, '10m', '3h')")
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise ConfigError(f"config key {key!r}: expected a duration, got {type(value).__name__}")
    if seconds < 0:
        raise ConfigError(f"config key {key!r}: duration must not be negative ({value!r})")
    return seconds


def _duration(default: float, doc: str):
    return field(default=default, metadata={"kind": "duration", "doc": doc})


def _int(default: int, doc: str, minimum: int = 0):
    return field(default=default, metadata={"kind": "int", "min": minimum, "doc": doc})


def _str(default: str, doc: str, secret: bool = False):
    return field(default=default, metadata={"kind": "str", "secret": secret, "doc": doc})


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
    # etcd
    etcd_endpoint: str = _str("127.0.0.1:23790", "etcd host:port")
    etcd_root: str = _str("seglake", "root prefix of every seglake key in etcd")
    etcd_user: str = _str("", "etcd user (empty: no auth)")
    etcd_password: str = _str("", "etcd password", secret=True)
    etcd_ca_cert: str = _str("", "CA certificate file for etcd TLS")
    etcd_timeout: float = _duration(10.0, "per-request etcd timeout")
    etcd_retries: int = _int(4, "retries on an unavailable etcd before giving up")
    # lifecycle tolerances and retention
    missing_tolerance: float = _duration(86400.0, "orphan files younger than this are kept")
    drop_tolerance: float = _duration(10800.0, "files of dropped segments are kept this long")
    copy_job_retention: float = _duration(10800.0, "finished copy jobs are kept this long")
    snapshot_pending_timeout: float = _duration(600.0, "PENDING snapshots older than this are stale")
    copy_job_timeout: float = _duration(3600.0, "a copy job still running after this fails")
    tolerance_floor: float = _duration(3600.0, "GC tolerances below this need force=true")
    # work sizing
    max_segments_per_task: int = _int(10, "segment mappings per copy task", minimum=1)
    inline_threshold_bytes: int = _int(256 << 20, "engine=auto runs inline below this many bytes")
    snapshot_inline_max_segments: int = _int(20000, "engine=auto writes manifests inline below this many segments")
    segments_per_manifest: int = _int(2000, "segments per snapshot manifest file", minimum=1)
    gc_inline_max_files: int = _int(2_000_000, "engine=auto marks inline below this many referenced files")
    id_block_size: int = _int(10000, "ids reserved per allocator round trip", minimum=1)
    copy_threads: int = _int(8, "parallel file copies per worker", minimum=1)
    gc_schedule: str = _str("@daily", "schedule of the gc DAG")
    spark_ui: bool = _bool(False, "enable the Spark UI for SparkSubmit jobs")
    # write-ahead log
    wal_fragment_bytes: int = _int(8 << 20, "a WAL fragment is closed at this many bytes", minimum=1024)
    wal_fragment_records: int = _int(10000, "a WAL fragment is closed at this many records", minimum=1)
    wal_batch_time: float = _duration(0.002, "a WAL writer waits this long to batch appends into one fragment")
    wal_txn_keepalive: float = _duration(60.0, "a WAL transaction expires this long after its last message")
    wal_scanner_startup_delay: float = _duration(0.0, "a consuming WAL scanner waits this long before it starts")
    wal_pause_poll: float = _duration(1.0, "how often a paused WAL scanner re-reads the pause flag")
    # WAL flusher (seal policies of growing segments; see lifecycle/flush.py)
    flush_seal_rows: int = _int(1_000_000, "a growing segment is sealed at this many rows", minimum=1)
    flush_seal_bytes: int = _int(256 << 20, "a growing segment is sealed at this many buffered bytes", minimum=1024)
    flush_seal_age: float = _duration(600.0, "a growing segment is sealed this long after its first row")
    flush_seal_idle: float = _duration(60.0, "a growing segment is sealed after this long without a new row")
    wal_flush_schedule: str = _str("*/5 * * * *", "schedule of the wal_flush DAG (e.g. @continuous)")

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
        """Defaults <- environment <- Airflow Variable JSON <- explicit overrides."""
        env = os.environ if env is None else env
        merged: dict[str, Any] = {}
        if env.get(ENV_JSON):
            merged.update(_parse_json(ENV_JSON, env[ENV_JSON]))
        for f in fields(cls):
            name = ENV_PREFIX + f.name.upper()
            if name in env and name != ENV_JSON:
                merged[f.name] = _from_env_string(f, env[name])
        if variable:
            merged.update(_parse_json(f"Variable {VARIABLE_NAME}", variable))
        if overrides:
            merged.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(merged)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "Settings":
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"unknown config key(s): {', '.join(map(repr, unknown))}")
        return cls(**{k: _coerce(known[k], v) for k, v in values.items()})

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
        for f in fields(self):
            if f.metadata.get("secret") and getattr(self, f.name):
                env[ENV_PREFIX + f.name.upper()] = getattr(self, f.name)
        return env

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.to_public().items())
        return f"Settings({inner})"

    @property
    def is_s3(self) -> bool:
        return self.store_uri.startswith("s3://")


def _parse_json(source: str, value: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    try:
        data = json.loads(value)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{source}: not valid JSON ({e.msg} at char {e.pos})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: must be a JSON object, got {type(data).__name__}")
    return data


def _from_env_string(f: dataclasses.Field, raw: str) -> Any:
    kind = f.metadata["kind"]
    if kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"config key {f.name!r}: {raw!r} is not an integer") from None
    if kind == "bool":
        low = raw.strip().lower()
        if low not in ("1", "0", "true", "false", "yes", "no"):
            raise ConfigError(f"config key {f.name!r}: {raw!r} is not a boolean")
        return low in ("1", "true", "yes")
    return raw


def _coerce(f: dataclasses.Field, value: Any) -> Any:
    kind = f.metadata["kind"]
    if kind == "duration":
        return parse_duration(f.name, value)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key {f.name!r}: expected an integer, got {value!r}")
        if value < f.metadata["min"]:
            raise ConfigError(f"config key {f.name!r}: must be >= {f.metadata['min']}, got {value}")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"config key {f.name!r}: expected true or false, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"config key {f.name!r}: expected a string, got {value!r}")
    return value
