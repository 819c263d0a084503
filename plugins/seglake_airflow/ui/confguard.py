"""ConfGuard: refuses a seglake DAG run whose conf has an unknown key with HTTP 400,
before Airflow creates the run (a root middleware of the API server, installed by the
`seglake_ui` plugin).

Airflow validates each declared Param but accepts keys it does not know and runs with
the defaults (no strict mode), so `{"tagret": "x"}` or gc `{"dryrun": true}` would
start a run. The REST trigger route (`POST .../api/v2/dags/{dag_id}/dagRuns`, which the
UI's trigger form also uses) is checked here against the DAG's contract
(seglake.params.SPECS): unknown keys are answered like a bad Param, naming the closest
valid key; everything else (types, ranges, patterns) is left to Airflow's own Param
validation, and the DAG's first task `check_conf` stays the backstop for every other
way of creating a run. Pure ASGI: importing it costs nothing in processes that only
load plugins.
"""

from __future__ import annotations

import json
import re

TRIGGER_PATH = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?\Z")
MAX_BODY = 4 << 20


def unknown_keys_error(dag_id: str, conf) -> str | None:
    """The 400 message for a conf with keys the DAG does not declare, else None."""
    from seglake.params import HINTS, SPECS, closest

    spec = SPECS.get(dag_id)
    if spec is None or not isinstance(conf, dict):
        return None
    unknown = [k for k in conf if k not in spec]
    if not unknown:
        return None
    return (f"{dag_id}: refused conf before any run: "
            + "; ".join(f"unknown conf key {k!r}{closest(k, list(spec), HINTS.get(dag_id))}" for k in unknown))


class ConfGuard:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        m = TRIGGER_PATH.search(scope.get("path", "")) if scope.get("type") == "http" else None
        if m is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                await _answer(send, 413, "request body too large")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None   # Airflow answers malformed JSON itself
        error = unknown_keys_error(m.group("dag_id"), doc.get("conf")) if isinstance(doc, dict) else None
        if error and await _may_trigger(scope, m.group("dag_id")):
            await _answer(send, 400, error)
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _may_trigger(scope, dag_id: str) -> bool:
    """True only for a caller Airflow would let trigger this DAG (bearer token, else the
    session cookie). Anyone else goes on to Airflow unchanged and gets its 401/403: an
    anonymous caller learns nothing about the DAG's keys from us."""
    from http.cookies import SimpleCookie

    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    from airflow.configuration import conf

    manager = get_auth_manager()
    if type(manager).__name__ == "SimpleAuthManager" and conf.getboolean(
            "core", "simple_auth_manager_all_admins", fallback=False):
        return True   # development mode: Airflow makes every caller an admin (its middleware may run after us)
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # noqa: BLE001 - a malformed cookie header: no session
            return False
        token = cookie[COOKIE_NAME_JWT_TOKEN].value if COOKIE_NAME_JWT_TOKEN in cookie else ""
    if not token.strip():
        return False
    try:
        user = await manager.get_user_from_token(token.strip())
        return bool(manager.is_authorized_dag(method="POST", access_entity=DagAccessEntity.RUN,
                                              details=DagDetails(id=dag_id), user=user))
    except Exception:  # noqa: BLE001 - expired, forged, unknown: Airflow answers it
        return False


async def _answer(send, status: int, detail: str) -> None:
    payload = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})
