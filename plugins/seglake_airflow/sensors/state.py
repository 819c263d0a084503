"""SeglakeStateSensor: waits for an engine condition (seglake.lifecycle.waits) in
reschedule mode, or deferrable through SeglakeStateTrigger. Pokes once before deferring;
an "error" status fails the task at once with the engine's message.

`deferrable` is chosen per run: True/False, a template such as "{{ params.deferrable }}",
or None/empty, which means `[operators] default_deferrable` read when the task RUNS
(on the worker), not when the DAG file is parsed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

UNSET = (None, "", "None")   # "None": an unset Param rendered by a template


def resolve_deferrable(value: Any) -> bool:
    """The run's choice; unset -> the worker's [operators] default_deferrable now."""
    if isinstance(value, bool):
        return value
    if value in UNSET:
        from airflow.configuration import conf

        return conf.getboolean("operators", "default_deferrable", fallback=False)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise AirflowFailException(f"deferrable must be true, false or empty, got {str(value)[:40]!r}")


class SeglakeStateSensor(BaseSensorOperator):
    template_fields = ("check_kwargs", "deferrable")

    def __init__(self, *, kind: str, check_kwargs: dict[str, Any], etcd_conn_id: str = "etcd_default",
                 deferrable: bool | str | None = None, **kwargs: Any) -> None:
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

        status, message = wait_status(self.kind, self.check_kwargs, self.etcd_conn_id, quiet=True)  # check_conf logged them
        self.log.info("%s: %s", self.kind, message)
        if status == "error":
            raise AirflowFailException(message)
        return status == "success"

    def execute(self, context) -> Any:
        deferrable = resolve_deferrable(self.deferrable)
        self.log.info("%s: waiting %s", self.kind, "in the triggerer (deferred)" if deferrable
                      else f"in {self.mode} mode")
        if not deferrable:
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
