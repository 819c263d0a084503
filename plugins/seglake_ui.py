"""Airflow plugin: the seglake page (nav entry "Seglake") and its /metrics endpoint.

Loaded by Airflow's plugin manager as a top-level module of plugins/; the app itself
lives in the `seglake_airflow.ui` package.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from seglake_airflow.ui import URL_PREFIX, LazyApp, create_app


class SeglakeUIPlugin(AirflowPlugin):
    name = "seglake_ui"
    fastapi_apps = [{"app": LazyApp(create_app), "url_prefix": URL_PREFIX, "name": "seglake"}]
    external_views = [{
        "name": "Seglake",
        "href": URL_PREFIX.lstrip("/") + "/",   # relative: works under a base path too
        "url_route": "seglake",
        "destination": "nav",
    }]
