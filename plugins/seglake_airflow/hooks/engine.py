"""SeglakeHook: everything a task needs to call the engine, resolved at run time.

Settings layers (later wins): engine defaults, the worker's SEGLAKE_* environment, the
Airflow Variable `seglake_config` (JSON), the `etcd_default` connection, the
`aws_default` connection (only when the store is s3://), then per-run overrides (a DAG's
params). Missing connections fall back to the layers below them.
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


class SeglakeHook(BaseHook):
    hook_name = "seglake"

    def __init__(self, etcd_conn_id: str = "etcd_default", aws_conn_id: str = "aws_default",
                 overrides: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.etcd_conn_id = etcd_conn_id
        self.aws_conn_id = aws_conn_id
        self.overrides = dict(overrides or {})

    @cached_property
    def settings(self):
        from airflow.sdk import Variable
        from seglake.config import VARIABLE_NAME, Settings

        variable = Variable.get(VARIABLE_NAME, default=None)
        base = Settings.load(variable=variable)
        layered: dict[str, Any] = {}
        if _connection(self.etcd_conn_id) is not None:
            from seglake_airflow.hooks.etcd import EtcdHook
            layered.update(EtcdHook(self.etcd_conn_id).settings_overrides())
        store_uri = self.overrides.get("store_uri", base.store_uri)
        if store_uri.startswith("s3://"):
            conn = _connection(self.aws_conn_id)
            if conn is not None:
                extra = conn.extra_dejson
                if conn.login:
                    layered["s3_access_key"] = conn.login
                    layered["s3_secret_key"] = conn.password or ""
                if extra.get("endpoint_url"):
                    layered["s3_endpoint"] = extra["endpoint_url"]
                if extra.get("region_name"):
                    layered["s3_region"] = extra["region_name"]
        settings = base.replace(**layered, **self.overrides)
        log.info("seglake settings: %s", settings.to_public())
        return settings

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


def wait_status(kind: str, check_kwargs: dict, etcd_conn_id: str = "etcd_default") -> tuple[str, str]:
    """One engine wait condition (seglake.lifecycle.waits), with a short-lived hook:
    what the sensor pokes and the trigger polls."""
    from seglake.lifecycle.waits import check

    hook = SeglakeHook(etcd_conn_id=etcd_conn_id)
    try:
        return check(hook.meta, kind, **check_kwargs)
    finally:
        hook.close()
