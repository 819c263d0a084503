"""The seglake page inside Airflow: a FastAPI app mounted by the `seglake_ui` plugin.

The page and /metrics read etcd and the store through the engine (`seglake.console`,
`seglake.metrics`); changes go through the typed REST API mounted at /api/v1
(`seglake_airflow.ui.api`), which creates DAG runs.
Airflow does not protect plugin routes on its own: the app requires Airflow's
authentication and DAG read access on EVERY route (an app-level dependency), so an
anonymous request gets 401 and a bad token 403 -- except a browser asking for a page
(`Accept: text/html`) without a valid session, which is sent to Airflow's login page
and comes back here after it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

URL_PREFIX = "/seglake"


class LazyApp:
    """An ASGI app that builds the real one on its first request, so the processes that
    merely load plugins (scheduler, workers, triggerer) never import FastAPI or Airflow's
    API security (~0.7 s each)."""

    def __init__(self, factory: Callable):
        self._factory = factory
        self._app = None

    async def __call__(self, scope, receive, send) -> None:
        if self._app is None:
            self._app = self._factory()
        await self._app(scope, receive, send)


@contextmanager
def _engine() -> Iterator[tuple[object, object]]:
    """Meta and Store resolved like a task resolves them (Variable + connections)."""
    from seglake_airflow.hooks.engine import SeglakeHook

    hook = SeglakeHook()
    try:
        yield hook.meta, hook.store
    finally:
        hook.close()


def _may_run(user) -> bool:
    """The user may start DAG runs (what every page action does: the API's run_rights)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity

    try:
        return bool(get_auth_manager().is_authorized_dag(method="POST", access_entity=DagAccessEntity.RUN,
                                                         user=user))
    except Exception:  # noqa: BLE001 - unknown: offer nothing (the API would decide anyway)
        return False


def _paused_schedules() -> list[tuple[str, str]] | None:
    """(dag_id, schedule) of the seglake DAGs that have a schedule but are paused (Airflow
    creates DAGs paused: on a fresh install nothing runs on its schedule), read from
    Airflow's metadata DB in this API server; None when it cannot be read."""
    try:
        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session
        from seglake.contract import SPECS
        from sqlalchemy import select

        with create_session() as session:
            rows = session.execute(select(DagModel.dag_id, DagModel.timetable_summary).where(
                DagModel.dag_id.in_(list(SPECS)), DagModel.is_paused.is_(True))).all()
        return sorted((d, str(t)) for d, t in rows if t not in (None, "", "None"))
    except Exception as e:  # noqa: BLE001 - the page shows the rest; this line says it does not know
        print(f"seglake page: paused DAGs not read: {type(e).__name__}: {e}", flush=True)
        return None


def create_app():
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import Depends, FastAPI
    from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse

    from fastapi import Request
    from fastapi.exceptions import HTTPException
    from fastapi.responses import RedirectResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    app = FastAPI(title="seglake", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(requires_access_dag(method="GET"))])

    @app.exception_handler(StarletteHTTPException)
    async def login_first(request: Request, exc: StarletteHTTPException):
        """A browser without a (valid) session goes to the login page; API clients keep
        the JSON status. Only a missing, expired or invalid session, never a refusal of
        a logged-in user (403 Forbidden)."""
        from fastapi.exception_handlers import http_exception_handler

        no_session = exc.status_code == 401 or (exc.status_code == 403 and "token" in str(exc.detail).lower())
        if no_session and request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
        return await http_exception_handler(request, exc if isinstance(exc, HTTPException) else
                                            HTTPException(exc.status_code, exc.detail, getattr(exc, "headers", None)))

    from airflow.api_fastapi.core_api.security import get_user

    @app.get("/", response_class=HTMLResponse)
    def page(user=Depends(get_user)) -> HTMLResponse:   # noqa: B008 - FastAPI's dependency
        from seglake import console
        from seglake_airflow.ui.render import render_page

        with _engine() as (meta, store):
            data = console.overview(meta, store)
        return HTMLResponse(render_page(data, can_act=_may_run(user), paused=_paused_schedules()),
                            headers={"Cache-Control": "no-store"})

    @app.get("/api/overview")
    def overview() -> JSONResponse:
        from seglake import console

        with _engine() as (meta, store):
            return JSONResponse(console.overview(meta, store), headers={"Cache-Control": "no-store"})

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        from seglake import metrics as m

        with _engine() as (meta, store):
            text = m.render(meta, store)
        return PlainTextResponse(text, media_type=m.CONTENT_TYPE)

    from seglake_airflow.ui.api import API_PREFIX, create_api

    app.mount(API_PREFIX, create_api())   # the typed REST API: its own auth dependency and OpenAPI
    return app
