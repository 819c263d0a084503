"""Airflow plugin: the seglake page (nav entry "Seglake"), its /metrics endpoint, and a
root middleware that refuses unknown conf keys of seglake DAG runs (HTTP 400).

Loaded by Airflow's plugin manager as a top-level module of plugins/; the app itself
lives in the `seglake_airflow.ui` package.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from seglake_airflow.ui import URL_PREFIX, LazyApp, create_app
from seglake_airflow.ui.confguard import ConfGuard


class SeglakeUIPlugin(AirflowPlugin):
    name = "seglake_ui"
    fastapi_apps = [{"app": LazyApp(create_app), "url_prefix": URL_PREFIX, "name": "seglake"}]
    # an unknown conf key of a seglake DAG: HTTP 400 before any run exists
    fastapi_root_middlewares = [{"middleware": ConfGuard, "name": "seglake_conf_guard"}]
    external_views = [{
        "name": "Seglake",
        "href": URL_PREFIX.lstrip("/") + "/",   # relative: works under a base path too
        "url_route": "seglake",
        "destination": "nav",
    }]
