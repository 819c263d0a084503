"""SeglakeHook: everything a task needs to call the engine, resolved at run time.

Settings layers (later wins): engine defaults, the worker's SEGLAKE_* environment, the
Airflow Variable `seglake_config` (JSON), the `etcd_default` connection, the
`aws_default` connection (only when the store is s3://), the `seglake_backup` connection
(the backup target's S3 credentials: login, password, extra endpoint_url / region_name),
then per-run overrides (a DAG's params). Missing connections fall back to the layers
below them.
"""

from __future__ import annotations

import logging
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook

log = logging.getLogger(__name__)


def _connection(conn_id: str):
    try:
        return BaseHook.get_connection(conn_id)
    except Exception:  # noqa: BLE001 - AirflowNotFoundException and friends: fall back
        return None


def has_connection(conn_id: str) -> bool:
    """Whether Airflow has connection `conn_id` (its secrets backends: the environment, the
    metastore in the API server): what a run's first step would look up."""
    return _connection(conn_id) is not None


def milvus_source_settings(conn_id: str, get_connection=None):
    """The settings a registered Milvus source's scheduled capture runs with: its connection
    `conn_id` gives the bucket's credentials. A connection Airflow does not have is refused
    (ConfigError, naming it) instead of falling back to the layers below it (the worker's
    milvus_s3_* environment: another Milvus's credentials, or none); only the default
    `seglake_milvus` may be absent."""
    from seglake.errors import ConfigError

    lookup = get_connection or _connection
    if conn_id != "seglake_milvus" and lookup(conn_id) is None:
        raise ConfigError(f"the Milvus source's Airflow connection {conn_id!r} does not exist (its bucket's "
                          f"credentials): add it, or set the source's conn_id")
    return SeglakeHook(milvus_conn_id=conn_id, get_connection=get_connection).settings


class SeglakeHook(BaseHook):
    hook_name = "seglake"

    def __init__(self, etcd_conn_id: str = "etcd_default", aws_conn_id: str = "aws_default", *,
                 backup_conn_id: str = "seglake_backup", milvus_conn_id: str = "seglake_milvus",
                 overrides: dict[str, Any] | None = None, quiet: bool = False,
                 get_connection=None, get_variable=None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.quiet = quiet   # no settings line in the log (a poller resolving them again and again)
        # where connections / the Variable come from: the Task SDK (tasks, API server) by
        # default; the CLI passes Airflow's core lookups (metadata DB included)
        self._get_connection = get_connection or _connection
        self._get_variable = get_variable
        self.etcd_conn_id = etcd_conn_id
        self.aws_conn_id = aws_conn_id
        self.backup_conn_id = backup_conn_id
        self.milvus_conn_id = milvus_conn_id   # the S3 credentials of a Milvus's bucket (milvus_backup)
        self.overrides = dict(overrides or {})

    def connection_layers(self, store_uri: str) -> list[tuple[str, dict[str, Any]]]:
        """Settings the connections provide, as named layers (secrets included: never log)."""
        layers: list[tuple[str, dict[str, Any]]] = []
        etcd = self._get_connection(self.etcd_conn_id)
        if etcd is not None:
            from seglake_airflow.hooks.etcd import EtcdHook
            layers.append((f"connection {self.etcd_conn_id}", EtcdHook(self.etcd_conn_id).settings_overrides(etcd)))
        for conn_id, prefix, wanted in ((self.aws_conn_id, "s3_", store_uri.startswith("s3://")),
                                        (self.backup_conn_id, "backup_s3_", True),
                                        (self.milvus_conn_id, "milvus_s3_", True)):
            conn = self._get_connection(conn_id) if wanted else None
            if conn is not None:
                from seglake_airflow.hooks.extras import checked_extra

                extra = checked_extra(conn_id, conn.extra_dejson, ("endpoint_url", "region_name"),
                                      shared=conn_id == self.aws_conn_id)
                layer = {}
                if conn.login:
                    layer[f"{prefix}access_key"] = conn.login
                    layer[f"{prefix}secret_key"] = conn.password or ""
                if extra.get("endpoint_url"):
                    layer[f"{prefix}endpoint"] = extra["endpoint_url"]
                if extra.get("region_name"):
                    layer[f"{prefix}region"] = extra["region_name"]
                layers.append((f"connection {conn_id}", layer))
        return layers

    def backup_target(self, uri: str | None = None):
        """The backup target store (lifecycle/backup): `uri` or config key backup_uri, with
        the `seglake_backup` connection's S3 credentials."""
        from seglake.lifecycle.backup.bundle import open_target
        return open_target(self.settings, uri or None)

    @cached_property
    def _resolved(self):
        from airflow.sdk import Variable
        from seglake.config import VARIABLE_NAME, Settings
        from seglake.settings_sources import resolve

        variable = (self._get_variable or (lambda name: Variable.get(name, default=None)))(VARIABLE_NAME)
        base = Settings.load(variable=variable)
        layers = self.connection_layers(self.overrides.get("store_uri", base.store_uri))
        settings, sources = resolve(variable, layers, self.overrides)
        if not self.quiet:
            log.info("seglake settings: %s", settings.to_public())
        return settings, sources

    @property
    def settings(self):
        """Engine defaults <- SEGLAKE_* env <- Variable <- connections <- per-run overrides."""
        return self._resolved[0]

    @property
    def sources(self) -> dict[str, str]:
        """{settings key: the layer that set it} (default, environment, Variable, connection ..., run)."""
        return self._resolved[1]

    @cached_property
    def meta(self):
        from seglake.meta import Meta
        return Meta.from_settings(self.settings)

    @cached_property
    def store(self):
        from seglake.storage import open_store
        return open_store(self.settings)

    def get_conn(self):
        return self.meta

    def close(self) -> None:
        if "meta" in self.__dict__:
            self.meta.close()


def wait_status(kind: str, check_kwargs: dict, etcd_conn_id: str = "etcd_default",
                quiet: bool = False) -> tuple[str, str]:
    """One engine wait condition (seglake.lifecycle.waits), with a short-lived hook:
    what the sensor pokes and the trigger polls (quietly: no settings line per poll)."""
    from seglake.lifecycle.waits import check

    hook = SeglakeHook(etcd_conn_id=etcd_conn_id, quiet=quiet)
    try:
        return check(hook.meta, kind, **check_kwargs)
    finally:
        hook.close()
