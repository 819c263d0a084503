"""The conf contract of every operation (one per DAG: the DAG ids name the operations),
declared once and used by every front end: the DAG's Param form (built from it in
plugins/seglake_airflow/params.py: Airflow validates a UI or REST conf against it
before a run exists), the REST API, the CLI (`gc schedule set` records a gc conf) and
`check_conf`, the strict check the first task of every DAG runs on the run's RAW
  conf (`dag_run.conf`) before any side effect: Airflow has no strict mode, so an
  unknown or misspelt key (`{"tagret": ...}`, gc `{"dryrun": true}`) would otherwise be
  ignored and its default used. Unknown keys are refused naming the closest valid one;
  what a DAG creates or destroys (collection, snapshot name, target, job id) has no
  default and is required; every number is finite and in range; names full-match.

Every conf key of every DAG is listed here; a DAG never declares a Param of its own.
It lives in the engine, not in the plugin, because the engine's CLI shares it; it
imports nothing of Airflow (Airflow's Param form is made from it on the plugin side).
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

from seglake.errors import ValidationError
from seglake.limits import HOUR, LIMITS
from seglake.meta.catalog import PCHANNEL_COUNT, pchannel_name
from seglake.names import NAME_RE, NAME_RULE
from seglake.runners import ENGINES  # the conf contract offers them

KINDS = ("name", "text", "number", "integer", "boolean", "tristate", "enum", "location")


@dataclass(frozen=True)
class Key:
    kind: str                      # one of KINDS
    title: str
    required: bool = False         # no default: the run must name it
    default: Any = None
    nullable: bool = False         # null / absent means "from config" (the default)
    description: str = ""
    limit: str = ""                # seglake.limits key for number / integer
    scale: float = 1.0             # one conf unit in the limit's units (HOUR: conf in hours)
    choices: tuple = ()
    max_length: int = 1024
    example: str = ""              # a valid value, shown next to a name's rule

    def check(self, key: str, value: Any) -> Any:
        """The value if valid, else ValidationError: one sentence naming `key`, the value
        and what is allowed (never a schema or a regex; never a secret here)."""
        if value is None:
            if self.nullable:
                return None
            hint = (" (a NaN or Infinity in a JSON conf arrives as null)"
                    if self.kind in ("number", "integer") else "")
            raise ValidationError(f"conf key {key!r} ({self.title}) is null{hint}; allowed: {self.allowed()}")
        ok = True
        if self.kind == "name":
            ok = isinstance(value, str) and NAME_RE.fullmatch(value) is not None
        elif self.kind == "text":   # no NUL, line break or escape: it goes to etcd, logs and the page
            ok = isinstance(value, str) and len(value) <= self.max_length and value.isprintable()
        elif self.kind == "location":
            ok = isinstance(value, str) and len(value) <= self.max_length and _is_location(value)
        elif self.kind in ("boolean", "tristate"):
            ok = isinstance(value, bool)
        elif self.kind == "enum":
            ok = value in self.choices
        elif self.kind == "integer" and isinstance(value, float):
            ok = False   # 391.0: the run's templates would pass "391.0" on, which no step reads as an integer
        else:
            try:
                LIMITS[self.limit].check(key, value, self.scale)
            except ValidationError:
                ok = False
        if not ok:
            raise ValidationError(f"conf key {key!r} ({self.title}): {show(value)} is not allowed; "
                                  f"allowed: {self.allowed()}")
        return value

    def allowed(self) -> str:
        """What the key accepts, in words (the form's description and every refusal)."""
        if self.kind == "name":
            return f"{NAME_RULE}, e.g. {self.example or 'demo'}"
        if self.kind == "text":
            return f"printable text of at most {self.max_length} characters (no line breaks)"
        if self.kind == "location":
            return "an absolute local path or s3://bucket/prefix" + (" (or null: the default)" if self.nullable else "")
        if self.kind in ("boolean", "tristate"):
            return "true or false" + (" (or null: the default)" if self.nullable else "")
        if self.kind == "enum":
            return "one of " + ", ".join(self.choices) + (" (or null: the default)" if self.nullable else "")
        lim = LIMITS[self.limit]
        lo, hi = lim.bounds(self.scale)
        unit = {HOUR: " hours"}.get(self.scale, " seconds" if lim.unit == "s" else "")
        kind = "an integer" if self.kind == "integer" else "a finite number"
        low = f"greater than {lo:g}" if lim.exclusive_minimum else f"from {lo:g}"
        return f"{kind} {low} {'and at most' if lim.exclusive_minimum else 'to'} {_num(hi)}{unit}"

    def help(self) -> str:
        """The form's description: what the field does, then (for names and numbers) its rule."""
        text = self.description.rstrip(".")
        if self.kind in ("name", "text", "number", "integer", "location"):
            text = (f"{text}. " if text else "") + f"Allowed: {self.allowed()}"
        return text + "." if text else ""


def _is_location(value: str) -> bool:
    """A store location the config accepts (seglake.config: absolute path or s3://bucket/prefix)."""
    from seglake.config import _check_store_uri
    from seglake.errors import ConfigError

    try:
        _check_store_uri(value, "backup_uri")
    except ConfigError:
        return False
    return True


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 2**63 else f"{x:g}"


def show(value: Any) -> str:
    """A conf value as the operator wrote it (JSON spelling: NaN, Infinity, true, null), short."""
    if isinstance(value, float) and not math.isfinite(value):
        text = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    elif isinstance(value, float) and value == 0 and math.copysign(1.0, value) < 0:
        text = "-0.0 (a negative zero: write 0)"
    elif isinstance(value, bool) or value is None:
        text = json.dumps(value)
    elif isinstance(value, str):
        from seglake.errors import redact

        text = json.dumps(redact(value), ensure_ascii=True)   # no credential of a URI echoed back
    else:
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_show = show


ENGINE = Key("enum", "Engine", default="auto", choices=ENGINES,
             description="auto: inline below the size threshold, Spark above it")
# the compaction keys by bytes and the L0 age (the compaction and compaction_policy forms)
COMPACTION_BYTES_KEYS = {
    "min_segment_bytes": Key("integer", "Min segment bytes", nullable=True, limit="compaction_min_segment_bytes",
                             description="Merge segments below this many stored bytes too (0: by rows only); "
                                         "empty: config"),
    "target_bytes": Key("integer", "Target bytes", nullable=True, limit="compaction_target_bytes",
                        description="Merged segments hold about this many bytes; empty: config"),
    "l0_age_seconds": Key("number", "L0 age (s)", nullable=True, limit="compaction_l0_age",
                          description="Fold delete-only L0 segments older than this into the segments they hit; "
                                      "empty: config"),
}
# Not a switch: a nullable boolean shows as "off" in Airflow's form and sends null. A
# dropdown of three labelled choices shows what is sent (the form draws a dropdown for
# an enum whose first non-null type is "string"; the enum admits only null/true/false).
DEFERRABLE = Key("tristate", "Deferrable wait", nullable=True,
                 description="How the run waits for the copy: in the triggerer (deferrable), in "
                             "reschedule mode, or as the worker's [operators] default_deferrable says")
DB = Key("name", "Database", default="default", example="default")
GC_REAL_RUN = ("Off: a REAL run that deletes the unreferenced files older than the orphan tolerance, the files "
               "of segments Dropped longer than the dropped-segment tolerance, then the records of those "
               "segments, expired or abandoned snapshots, copy jobs past retention and empty Dropped "
               "collections. On (the default): the mark alone, nothing is deleted; its report lists what a "
               "real run would delete")

BACKUP_URI = Key("location", "Backup target", nullable=True, max_length=1024,
                 description="A local directory or s3://bucket/prefix; empty: config key backup_uri. S3 "
                             "credentials come from the seglake_backup connection (never from the conf)")
RATES = {
    "max_mib_per_second": Key("number", "Max MiB/s", default=0, limit="copy_max_bytes_per_second", scale=1 << 20,
                              description="Copy rate limit shared by every runner (MiB per second); 0: none"),
    "max_requests_per_second": Key("number", "Max requests/s", default=0, limit="copy_max_requests_per_second",
                                   description="File copies per second, shared by every runner; 0: none"),
}


def _name(title: str, description: str = "", example: str = "demo") -> Key:
    return Key("name", title, required=True, description=description, example=example)


SPECS: dict[str, dict[str, Key]] = {
    "snapshot_create": {
        "collection": _name("Collection", "The collection to snapshot"),
        "name": _name("Snapshot name", "A new snapshot's name, unique in the collection", example="nightly_1"),
        "description": Key("text", "Description", default="", nullable=True),  # "" alone would be required
        "ttl_hours": Key("number", "TTL (hours)", default=0, limit="snapshot_ttl", scale=HOUR,
                         description="Garbage-collect the snapshot after this long; 0 keeps it until dropped"),
        "db": DB,
        "engine": ENGINE,
    },
    "snapshot_drop": {
        "collection": _name("Collection", "The snapshot's collection"),
        "name": _name("Snapshot name", "The snapshot to drop (no default)", example="nightly_1"),
        "db": DB,
    },
    "snapshot_restore": {
        "collection": _name("Source collection", "The snapshot's collection"),
        "snapshot": Key("name", "Snapshot", nullable=True, example="nightly_1",
                        description="A COMMITTED snapshot of the source collection; empty with as_of (the "
                                    "latest COMMITTED snapshot at or before it is chosen)"),
        "as_of": Key("text", "As of", nullable=True, max_length=64,
                     description="Restore the collection as it was at this instant instead of a snapshot: "
                                 "ISO-8601 with a time zone (2026-11-27T12:00:00Z) or a TSO timestamp in "
                                 "decimal; needs the collection's point-in-time window (seglake pitr set)"),
        "target": _name("Target collection", "Must not exist yet (no default)", example="demo_restored"),
        "db": DB,
        "engine": ENGINE,
        "timeout_hours": Key("number", "Job timeout (hours)", nullable=True, limit="restore_timeout", scale=HOUR,
                             description="Empty: copy_job_timeout from config (1 h)"),
        "deferrable": DEFERRABLE,
        "max_mib_per_second": Key("number", "Max MiB/s", default=0, limit="copy_max_bytes_per_second",
                                  scale=1 << 20, description="Copy rate limit shared by every runner of the "
                                                             "job (MiB per second); 0: none"),
        "max_requests_per_second": Key("number", "Max requests/s", default=0, limit="copy_max_requests_per_second",
                                       description="File copies per second, shared by every runner; 0: none"),
    },
    "snapshot_export": {
        "collection": _name("Collection", "The snapshot's collection"),
        "snapshot": _name("Snapshot", "A COMMITTED snapshot to export", example="nightly_1"),
        "bundle": Key("name", "Bundle name", nullable=True, example="nightly_1",
                      description="Empty: the snapshot's name"),
        "backup_uri": BACKUP_URI,
        "db": DB,
        **RATES,
    },
    "snapshot_restore_external": {
        "collection": _name("Bundle's collection", "The collection the bundle was exported from"),
        "bundle": Key("name", "Bundle", nullable=True, example="nightly_1",
                      description="A committed bundle in the backup target; with as_of: the bundle to start "
                                  "from (empty: the latest one at or before the instant)"),
        "as_of": Key("text", "As of", nullable=True, max_length=64,
                     description="Restore the collection as it was at this instant, from the backup target "
                                 "alone (a bundle + the WAL archive: retention policy archive): ISO-8601 with a "
                                 "time zone or a TSO timestamp in decimal"),
        "target": _name("Target collection", "The new collection (must not exist yet; no default)",
                        example="demo_restored"),
        "backup_uri": BACKUP_URI,
        "db": DB,
        "engine": ENGINE,
        "timeout_hours": Key("number", "Job timeout (hours)", nullable=True, limit="restore_timeout", scale=HOUR,
                             description="Empty: copy_job_timeout from config (1 h)"),
        "deferrable": DEFERRABLE,
        **RATES,
    },
    "compaction": {
        "collection": Key("name", "Collection", nullable=True, example="demo",
                          description="The collection to compact; empty: every collection whose compaction policy "
                                      "says scheduled (what a scheduled run does)"),
        "db": DB,
        "dry_run": Key("boolean", "Dry run", default=False,
                       description="Plan only: the units and their expected gain, nothing changed"),
        "min_segment_rows": Key("integer", "Min segment rows", nullable=True, limit="compaction_min_segment_rows",
                                description="Merge segments below this many rows; empty: config "
                                            "compaction_min_segment_rows"),
        "target_rows": Key("integer", "Target rows", nullable=True, limit="compaction_target_rows",
                           description="Merged segments hold about this many rows; empty: config "
                                       "compaction_target_rows"),
        "delete_ratio": Key("number", "Delete ratio", nullable=True, limit="compaction_delete_ratio",
                            description="Rewrite a segment alone above this deleted fraction (0..1); empty: "
                                        "config compaction_delete_ratio"),
        "protection_seconds": Key("number", "Snapshot protection (s)", nullable=True, limit="compaction_protection",
                                  description="Skip a collection snapshotted within this long; empty: config "
                                              "compaction_protection"),
        **COMPACTION_BYTES_KEYS,
        "engine": ENGINE,
    },
    "compaction_policy": {
        "collection": _name("Collection", "The collection whose compaction policy to set (no default)"),
        "db": DB,
        **{k: Key(kind, title, nullable=True, limit=f"compaction_{lim}", description=d + "; empty: config")
           for k, kind, title, lim, d in (
            ("min_segment_rows", "integer", "Min segment rows", "min_segment_rows", "Merge segments below this many rows"),
            ("target_rows", "integer", "Target rows", "target_rows", "Merged segments hold about this many rows"),
            ("delete_ratio", "number", "Delete ratio", "delete_ratio", "Rewrite a segment alone above this deleted "
                                                                      "fraction (0..1)"),
            ("protection_seconds", "number", "Snapshot protection (s)", "protection", "Skip a collection snapshotted "
                                                                                     "within this long"))},
        **COMPACTION_BYTES_KEYS,
        "scheduled": Key("boolean", "Scheduled", default=False,
                         description="A scheduled run of the compaction DAG (config compaction_schedule) compacts this collection"),
        "clear": Key("boolean", "Clear the policy", default=False,
                     description="Remove the collection's policy: config applies again (the other keys are ignored)"),
    },
    "snapshot_verify": {
        "collection": _name("Bundle's collection", "The collection the bundle was exported from"),
        "bundle": _name("Bundle", "The bundle to read and check", example="nightly_1"),
        "backup_uri": BACKUP_URI,
        "db": DB,
        "engine": ENGINE,
    },
    "milvus_restore": {
        "collection": _name("Captured collection", "The Milvus collection the capture (bundle) was taken of"),
        "bundle": _name("Bundle", "The capture to restore", example="nightly_1"),
        "name": Key("name", "New collection", required=True, example="demo_restored",
                    description="The collection created in the target Milvus (must not exist)"),
        "milvus_conn_id": Key("name", "Milvus connection", default="milvus_default", example="milvus_default",
                              description="Airflow connection of the target Milvus: host, port, login/password; "
                                          "extra: bucket, s3_endpoint, s3_region, s3_access_key, s3_secret_key"),
        "sample": Key("integer", "Sampled pks", default=100, limit="milvus_restore_sample",
                      description="Primary keys whose values verify compares with the bundle"),
        "backup_uri": BACKUP_URI,
        "db": DB,
    },
    "copy_segment_job": {
        "job_id": Key("integer", "Copy job id", required=True, limit="id",
                      description="From `seglake jobs list` (no default)"),
        "engine": Key("enum", "Engine", nullable=True, choices=ENGINES,
                      description="Empty: the engine the job was created with (a resume keeps it)"),
        "deferrable": DEFERRABLE,
    },
    "gc": {
        "dry_run": Key("boolean", "Dry run", default=True, description=GC_REAL_RUN),
        "collection": Key("name", "Collection", nullable=True, description="Empty: the whole store",
                          example="demo"),
        "db": DB,
        "missing_tolerance_hours": Key("number", "Orphan tolerance (hours)", nullable=True,
                                       limit="missing_tolerance", scale=HOUR,
                                       description="Empty: from config (1 day)"),
        "drop_tolerance_hours": Key("number", "Dropped-segment tolerance (hours)", nullable=True,
                                    limit="drop_tolerance", scale=HOUR, description="Empty: from config (3 h)"),
        "force": Key("boolean", "Force", default=False, description="Allow tolerances below the 1 hour floor"),
        "engine": ENGINE,
    },
    "verify_collection": {
        "collection": _name("Collection", "Name of the collection to verify"),
        "db": DB,
        "engine": ENGINE,
    },
    "drop_collection": {
        "collection": _name("Collection", "Name of the collection to drop (Created or already Dropping)"),
        "db": DB,
        "wait_for_flush": Key("boolean", "Wait for flush", default=True,
                              description="Wait until wal_flush released every vchannel, then finish the drop; "
                                          "false: only begin (Dropping) and return"),
        "timeout_hours": Key("number", "Wait timeout (hours)", default=1, limit="drop_timeout", scale=HOUR,
                             description="Give up waiting for the flushers after this long"),
    },
    "snapshot_schedule": {
        "collection": Key("name", "Collection", nullable=True,
                          description="Empty: every collection with a retention policy"),
        "db": DB,
        "dry_run": Key("boolean", "Dry run", default=False,
                       description="List what the policy would create and prune; change nothing"),
        "milvus_source": Key("name", "Milvus source", nullable=True,
                             description="Empty: every registered Milvus source (none when a collection is "
                                         "named); named: that source only (and no seglake collection unless "
                                         "one is named)"),
    },
    "snapshot_retention": {
        "collection": _name("Collection", "The collection whose retention policy to set (no default)"),
        "db": DB,
        **{f"keep_{u}": Key("integer", f"Keep {u}", default=0, limit="retention_keep",
                            description=d) for u, d in (
            ("last", "The newest N schedule snapshots"),
            ("hourly", "The newest snapshot of each of the last N hours that have one"),
            ("daily", "... of each of the last N days"),
            ("weekly", "... of each of the last N ISO weeks"),
            ("monthly", "... of each of the last N months"))},
        "export": Key("boolean", "Export to the backup target", default=False,
                      description="Also keep the schedule's snapshots as bundles in the backup target "
                                  "(config key backup_uri), pruned there by the same policy"),
        "archive": Key("boolean", "Archive the WAL (continuous backup)", default=False,
                       description="Ship the collection's WAL to the backup target as it is written (the "
                                   "wal_archive DAG); the WAL keeps what is not shipped yet"),
        "clear": Key("boolean", "Clear the policy", default=False,
                     description="Remove the collection's policy (the keep counts are ignored)"),
    },
    "pitr_window": {
        "collection": _name("Collection", "The collection whose point-in-time window to set (no default)"),
        "db": DB,
        "window": Key("text", "Window", nullable=True, max_length=32,
                      description="How far back restores reach: 3d, 12h, 90m or seconds (1 minute .. 365 days)"),
        "clear": Key("boolean", "Turn the window off", default=False,
                     description="Turn the window off (what it held is released at the next GC)"),
    },
    "collection_undrop": {
        "collection": _name("Dropped collection", "The collection dropped inside its point-in-time window, or "
                                                  "whose WAL archive and a bundle are in the backup target"),
        "target": _name("Target collection", "The new collection it comes back as (must not exist yet; no "
                                             "default)", example="demo_back"),
        "db": DB,
        "from_target": Key("boolean", "From the backup target", default=False,
                           description="When this store cannot give it (its record, log or files gone): from "
                                       "the backup target alone, its latest bundle + the WAL archive up to the "
                                       "drop"),
        "bundle": Key("name", "Bundle", nullable=True, example="nightly_1",
                      description="With from_target: start from this bundle (empty: the latest one of the name "
                                  "with log positions)"),
        "backup_uri": BACKUP_URI,
        "engine": ENGINE,
        "timeout_hours": Key("number", "Job timeout (hours)", nullable=True, limit="restore_timeout", scale=HOUR,
                             description="Empty: copy_job_timeout from config (1 h)"),
        "deferrable": DEFERRABLE,
    },
    "restore_database": {
        "db": DB,
        "as_of": Key("text", "As of", required=True, max_length=64,
                     description="The one instant every collection is restored as of: ISO-8601 with a time "
                                 "zone (2026-11-27T12:00:00Z) or a TSO timestamp in decimal"),
        "suffix": Key("text", "Suffix", required=True, max_length=64,
                      description="Each collection comes back as its name + this (letters, digits, '_'), "
                                  "e.g. _noon"),
        "collections": Key("text", "Collections", nullable=True, max_length=65536,
                           description="Comma-separated names; empty: every collection of the database (from "
                                       "the backup target: every one with a bundle there)"),
        "from_target": Key("boolean", "From the backup target", default=False,
                           description="From the backup target alone (bundles + the WAL archive)"),
        "backup_uri": BACKUP_URI,
        "timeout_hours": Key("number", "Job timeout (hours)", nullable=True, limit="restore_timeout", scale=HOUR,
                             description="Empty: copy_job_timeout from config (1 h)"),
    },
    "wal_archive": {
        "seconds": Key("number", "Run time (s)", default=240, limit="archive_seconds",
                       description="Keep shipping new WAL fragments for this long (0: once)"),
        "backup_uri": BACKUP_URI,
        "max_mib_per_second": RATES["max_mib_per_second"],
    },
    "milvus_backup": {
        "collections": Key("text", "Milvus collections", default="", nullable=True, max_length=65536,
                           description="Comma-separated names of collections of the database; empty: set "
                                       "all_collections"),
        "all_collections": Key("boolean", "All collections", default=False,
                               description="Capture every collection of the database (then name none)"),
        "milvus_etcd": Key("text", "Milvus etcd", required=True, max_length=4096,
                           description="Milvus's etcd endpoints: host:port[,host:port...]"),
        "milvus_root": Key("text", "Milvus etcd root", default="by-dev", description="Milvus's etcd.rootPath"),
        "bucket": Key("text", "Milvus bucket", required=True,
                      description="Milvus's bucket (S3 credentials: the seglake_milvus connection), or an "
                                  "absolute local path (Milvus's local storage)"),
        "bucket_root": Key("text", "Milvus bucket root", default="files", description="Milvus's minio.rootPath"),
        "bundle": _name("Bundle", "The bundle name (one bundle per collection)", example="nightly_1"),
        "backup_uri": BACKUP_URI,
        "db": DB,
        "engine": ENGINE,
        **RATES,
    },
    "wal_flush": {
        "pchannel": Key("enum", "pchannel", default="all",
                        choices=("all", *(pchannel_name(i) for i in range(PCHANNEL_COUNT))),
                        description="One pchannel or all"),
        "engine": ENGINE,
        "max_seconds": Key("number", "Max run time (s)", default=240, limit="flush_max_seconds",
                           description="Stop reading the log after this long (a run ends at a time tick)"),
        "flush_all": Key("boolean", "Flush all", default=False,
                         description="Seal and flush every growing segment at the end of the run"),
        "wait_timeout_seconds": Key("number", "Wait timeout (s)", default=3600, limit="flush_wait_timeout",
                                    description="How long to wait while paused"),
    },
}

# Keys people send to the wrong DAG, where difflib finds nothing close.
HINTS: dict[str, dict[str, str]] = {
    "snapshot_create": {"snapshot": "name"},
    "snapshot_drop": {"snapshot": "name"},
    "milvus_restore": {"target": "name", "target_collection": "name", "conn_id": "milvus_conn_id"},
    "snapshot_restore": {"name": "snapshot", "target_collection": "target", "timeout": "timeout_hours"},
    "copy_segment_job": {"job": "job_id", "id": "job_id"},
    "snapshot_export": {"name": "snapshot", "target": "backup_uri", "target_uri": "backup_uri", "uri": "backup_uri"},
    "snapshot_restore_external": {"name": "bundle", "uri": "backup_uri", "target_uri": "backup_uri",
                                  "target_collection": "target"},
    "snapshot_verify": {"name": "bundle", "target": "backup_uri", "target_uri": "backup_uri", "uri": "backup_uri"},
    "gc": {"tolerance": "missing_tolerance_hours"},
    "milvus_backup": {"collection": "collections", "etcd": "milvus_etcd", "root": "milvus_root",
                      "target": "backup_uri", "uri": "backup_uri", "name": "bundle"},
    "drop_collection": {"name": "collection", "wait": "wait_for_flush", "timeout": "timeout_hours"},
    "collection_undrop": {"name": "collection", "as": "target", "new_name": "target", "uri": "backup_uri",
                          "target_uri": "backup_uri", "timeout": "timeout_hours"},
    "restore_database": {"database": "db", "time": "as_of", "names": "collections", "uri": "backup_uri",
                         "target_uri": "backup_uri", "timeout": "timeout_hours"},
}


def closest(key: str, valid: list[str], hints: Mapping[str, str] | None = None) -> str:
    """' (did you mean ...?)' or the list of valid keys, for an error message."""
    near = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
    guess = near[0] if near else (hints or {}).get(str(key))
    if guess:
        return f" (did you mean {guess!r}?)"
    return f"; valid keys: {', '.join(valid)}"


def check_conf(dag_id: str, conf: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run's conf with defaults filled in, or one ValidationError listing every
    problem: unknown keys (naming the closest valid one), missing required keys, values
    of the wrong type, NaN/Infinity, out of range. Pure: call it before any side effect."""
    spec = SPECS[dag_id]
    conf = {} if conf is None else conf
    if not isinstance(conf, Mapping):
        raise ValidationError(f"{dag_id}: conf must be a JSON object, got {type(conf).__name__}")
    problems: list[str] = []
    for key in conf:
        if key not in spec:
            problems.append(f"unknown conf key {key!r}{closest(key, list(spec), HINTS.get(dag_id))}")
    out: dict[str, Any] = {}
    for key, k in spec.items():
        if k.required and conf.get(key) is None and key not in conf:
            problems.append(f"missing conf key {key!r} ({k.title}), which has no default; allowed: {k.allowed()}")
            continue
        try:
            out[key] = k.check(key, conf[key]) if key in conf else k.default
        except ValidationError as e:
            problems.append(str(e))
    if dag_id == "snapshot_restore" and not problems:
        problems += _restore_source_problems(out)
    if dag_id == "snapshot_restore_external" and not problems:
        problems += _external_source_problems(out)
    if dag_id == "restore_database" and not problems:
        problems += _database_problems(out)
    if dag_id == "pitr_window" and not problems and out["window"] is not None:
        problems += _window_problems(out["window"])
    if dag_id == "collection_undrop" and not problems and out["bundle"] is not None and not out["from_target"]:
        problems.append("conf key 'bundle' (Bundle): a bundle goes with an undrop from the backup target "
                        "(from_target: true)")
    if not problems and dag_id == "milvus_backup":   # what the key kinds cannot say: endpoints, roots, names
        from seglake.milvus.capture import check_request
        try:
            check_request(out["milvus_etcd"], out["milvus_root"], out["bucket"], out["bucket_root"],
                          out["collections"] or "", out["bundle"], db=out["db"],
                          all_collections=out["all_collections"])
        except ValidationError as e:
            problems.append(str(e))
    if problems:
        raise ValidationError(f"{dag_id}: refused conf before any change: " + "; ".join(problems))
    return out


def _restore_source_problems(conf: Mapping[str, Any]) -> list[str]:
    """A restore names exactly one source: a snapshot, or an instant (as_of) whose format is checked."""
    if (conf.get("snapshot") is None) == (conf.get("as_of") is None):
        return ["give exactly one of conf keys 'snapshot' (restore that snapshot) and 'as_of' (restore the "
                "collection as it was at that instant)"]
    if conf.get("as_of") is not None:
        from seglake.lifecycle.pitr.instants import parse_as_of
        try:
            parse_as_of(conf["as_of"])
        except ValidationError as e:
            return [f"conf key 'as_of' (As of): {e}"]
    return []


def _external_source_problems(conf: Mapping[str, Any]) -> list[str]:
    """A restore from the backup target names a bundle, an instant (as_of), or both (the
    instant restored from that bundle)."""
    if conf.get("bundle") is None and conf.get("as_of") is None:
        return ["give conf key 'bundle' (restore that bundle) or 'as_of' (restore the collection as it was at "
                "that instant, from a bundle and the WAL archive), or both"]
    return _restore_source_problems({"snapshot": None, **conf}) if conf.get("as_of") is not None else []


def _window_problems(window: Any) -> list[str]:
    """pitr_window: the window is a duration in range (the form's text: '3d', '12h', '90m',
    seconds), checked as set_window checks it, so a bad one is refused before a run exists."""
    from seglake.lifecycle.pitr.window import parse_window

    try:
        parse_window(window)
    except ValidationError as e:
        return [f"conf key 'window' (Window): {e}"]
    return []


def _database_problems(conf: Mapping[str, Any]) -> list[str]:
    """restore_database: the instant's format, the suffix and each named collection (a
    target name is a collection's name + the suffix)."""
    import re

    from seglake.lifecycle.pitr.instants import parse_as_of
    from seglake.names import validate_name
    out = []
    try:
        parse_as_of(conf["as_of"])
    except ValidationError as e:
        out.append(f"conf key 'as_of' (As of): {e}")
    suffix_ok = re.fullmatch(r"[A-Za-z0-9_]{1,64}", conf["suffix"]) is not None
    if not suffix_ok:
        out.append(f"conf key 'suffix' (Suffix): {show(conf['suffix'])} is not 1..64 letters, digits or '_'")
    given = conf.get("collections") or ""
    names = [c.strip() for c in given.split(",")] if given.strip() else []
    if names and not any(names):   # " , " is not "every collection": empty means the key left empty
        out.append(f"conf key 'collections' (Collections): {show(given)} names no collection; leave it empty "
                   "for every collection of the database")
    elif "" in names:
        out.append(f"conf key 'collections' (Collections): {show(given)} has an empty name between commas")
    names = [n for n in names if n]
    for n in names:
        try:
            validate_name("collection", n)
            if suffix_ok:   # each target's name: the collection's + the suffix, a name too
                validate_name("target collection", n + conf["suffix"])
        except ValidationError as e:
            out.append(f"conf key 'collections' (Collections): {e}")
    if len(set(names)) != len(names):
        out.append("conf key 'collections' (Collections): names one collection twice")
    return out


def check_gc_floor(conf: Mapping[str, Any], floor_seconds: float) -> None:
    """Refuse a gc conf (already through check_conf) whose tolerance is below the floor
    without force: the same rule as GCOptions.check, in the conf's units, before any run."""
    if conf.get("force"):
        return
    floor_h = floor_seconds / HOUR
    for key in ("missing_tolerance_hours", "drop_tolerance_hours"):
        hours = conf.get(key)
        if hours is not None and hours * HOUR < floor_seconds:
            raise ValidationError(
                f"gc: refused conf before any change: conf key {key!r} ({SPECS['gc'][key].title}): "
                f"{show(hours)} is below the GC floor of {floor_h:g} hour{'s' if floor_h != 1 else ''}; "
                f"allowed: at least {floor_h:g}, or set force to true to go below the floor")


GC_BACKFILL_REFUSED = (
    "gc: a backfill is refused and nothing is deleted: garbage collection has no past intervals to replay "
    "(every run looks at the store as it is now); trigger one run instead (a dry run unless dry_run is false)")


def refuse_gc_backfill(run_type: str | None) -> None:
    """A backfill of gc would replay the scheduled conf (possibly a real GC) once per
    past interval: refused, before any change (the API refuses creating one; this is the
    backstop for a backfill made any other way, e.g. `airflow backfill create`)."""
    if run_type == "backfill":
        raise ValidationError(GC_BACKFILL_REFUSED)


def gc_schedule_note(schedule: str | None) -> str:
    """What the gc trigger form says when the DAG has a schedule: unpausing it (Airflow's
    *Unpause on trigger* box) also lets the scheduler start the latest interval's run at
    once, and that run does what `seglake gc schedule set` recorded, not the form."""
    if not schedule:
        return ""
    return (f"This DAG has a schedule ({schedule}): unpausing it (the *Unpause on trigger* box) also starts "
            f"the scheduled run of the latest interval at once, which does what `seglake gc schedule set` "
            f"recorded (a real GC if it says --execute), not what this form says; it is refused, deleting "
            f"nothing, until that is set.")


def scheduled_gc_conf(record: Mapping[str, Any] | None) -> dict[str, Any]:
    """The conf a scheduled gc run uses: the operator's record (`seglake gc schedule set`),
    checked like a triggered conf; ValidationError when there is none (a scheduled run
    never falls back to the form's defaults)."""
    if not record or not isinstance(record.get("conf"), Mapping):
        raise ValidationError(
            "gc: a scheduled run has no operator settings, so it was refused and nothing was deleted; "
            "set them with `seglake gc schedule set --dry-run` (or `--execute` for a real GC)")
    return check_conf("gc", record["conf"])
