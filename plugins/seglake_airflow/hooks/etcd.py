"""EtcdHook: the `etcd_default` connection -> a seglake KV client.

Connection fields: host, port (2379), login/password (etcd auth), extra
{"endpoints": "h1:2379,h2:2379" (a cluster; overrides host/port), "ca_cert": "/path",
"root": "seglake"}.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook


class EtcdHook(BaseHook):
    conn_name_attr = "etcd_conn_id"
    default_conn_name = "etcd_default"
    conn_type = "etcd"
    hook_name = "etcd"

    def __init__(self, etcd_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.etcd_conn_id = etcd_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema"],
            "relabeling": {"login": "User", "password": "Password"},
            "placeholders": {"host": "127.0.0.1", "port": "2379",
                             "extra": '{"endpoints": "h1:2379,h2:2379", "ca_cert": "/path/ca.pem", "root": "seglake"}'},
        }

    def settings_overrides(self, conn=None) -> dict[str, Any]:
        """Settings keys this connection (or `conn`, already fetched) provides (secrets
        included; never log them)."""
        conn = conn if conn is not None else self.get_connection(self.etcd_conn_id)
        from seglake_airflow.hooks.extras import checked_extra

        extra = checked_extra(getattr(conn, "conn_id", None) or self.etcd_conn_id, conn.extra_dejson,
                              ("endpoints", "ca_cert", "root"))
        out: dict[str, Any] = {}
        if extra.get("endpoints"):
            out["etcd_endpoint"] = extra["endpoints"]
        elif conn.host:
            out["etcd_endpoint"] = f"{conn.host}:{conn.port or 2379}"
        if conn.login:
            out["etcd_user"] = conn.login
            out["etcd_password"] = conn.password or ""
        if extra.get("ca_cert"):
            out["etcd_ca_cert"] = extra["ca_cert"]
        if extra.get("root"):
            out["etcd_root"] = extra["root"]
        return out

    def get_conn(self):
        from seglake.config import Settings
        from seglake.meta.kv import KV

        return KV.from_settings(Settings.load(overrides=self.settings_overrides()))
