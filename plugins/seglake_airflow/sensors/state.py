"""SeglakeStateSensor: waits for an engine condition (seglake.lifecycle.waits) in
reschedule mode, or deferrable through SeglakeStateTrigger. Pokes once before deferring;
an "error" status fails the task at once with the engine's message."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.configuration import conf
from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException


class SeglakeStateSensor(BaseSensorOperator):
    template_fields = ("check_kwargs",)

    def __init__(self, *, kind: str, check_kwargs: dict[str, Any], etcd_conn_id: str = "etcd_default",
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("poke_interval", 5)
        kwargs.setdefault("timeout", 6 * 3600)
        super().__init__(**kwargs)
        self.kind = kind
        self.check_kwargs = check_kwargs
        self.etcd_conn_id = etcd_conn_id
        self.deferrable = deferrable

    def poke(self, context) -> bool:
        from seglake_airflow.hooks.engine import wait_status

        status, message = wait_status(self.kind, self.check_kwargs, self.etcd_conn_id)
        self.log.info("%s: %s", self.kind, message)
        if status == "error":
            raise AirflowFailException(message)
        return status == "success"

    def execute(self, context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        from seglake_airflow.triggers.state import SeglakeStateTrigger

        self.defer(
            trigger=SeglakeStateTrigger(self.kind, self.check_kwargs, self.etcd_conn_id, float(self.poke_interval)),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )

    def execute_complete(self, context, event: dict[str, Any] | None = None) -> None:
        if not event or event.get("status") != "success":
            raise AirflowFailException((event or {}).get("message", "no event from trigger"))
        self.log.info("%s: %s", self.kind, event.get("message"))
