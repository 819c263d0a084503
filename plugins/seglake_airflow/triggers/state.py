"""SeglakeStateTrigger: polls one engine wait condition (seglake.lifecycle.waits) from
the triggerer. Serializable kwargs only; never writes; blocking engine calls run in a
thread (asyncio.to_thread).

Its log is the wait's progress: the engine's status line (e.g. "copy job 7: 3/10
tasks completed") whenever it changes, and at least every `LOG_EVERY_S` while it does
not. The settings are resolved quietly (no settings dump on every poll)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

LOG_EVERY_S = 60.0


class SeglakeStateTrigger(BaseTrigger):
    def __init__(self, kind: str, check_kwargs: dict[str, Any], etcd_conn_id: str = "etcd_default",
                 poll_interval: float = 5.0) -> None:
        super().__init__()
        self.kind = kind
        self.check_kwargs = dict(check_kwargs)
        self.etcd_conn_id = etcd_conn_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("seglake_airflow.triggers.state.SeglakeStateTrigger",
                {"kind": self.kind, "check_kwargs": self.check_kwargs,
                 "etcd_conn_id": self.etcd_conn_id, "poll_interval": self.poll_interval})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from seglake_airflow.hooks.engine import wait_status

        last, logged_at = None, 0.0
        while True:
            try:
                status, message = await asyncio.to_thread(wait_status, self.kind, self.check_kwargs,
                                                          self.etcd_conn_id, True)
            except Exception as e:  # noqa: BLE001 - report, never crash the triggerer
                status, message = "error", f"{type(e).__name__}: {e}"
            if status != "waiting":
                self.log.info("%s: %s: %s", self.kind, status, message)
                yield TriggerEvent({"status": status, "message": message})
                return
            if message != last or time.monotonic() - logged_at >= LOG_EVERY_S:
                self.log.info("%s: %s", self.kind, message)
                last, logged_at = message, time.monotonic()
            await asyncio.sleep(self.poll_interval)
