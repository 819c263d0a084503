"""`seglake config show --airflow`, the Airflow side: the settings a DAG run would use,
resolved exactly as its tasks resolve them (SeglakeHook: environment, the Variable, the
etcd_default / aws_default connections from Airflow's secrets backends and metadata DB),
each key with the layer that set it; secrets masked.

The engine's CLI never imports this plugin: it runs this module as a program
(`python -m seglake_airflow.config_show [--json]`, plugins/ on the path) and passes its
output and exit code through.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys


@contextlib.contextmanager
def _stdout_to_stderr():
    """Airflow's own log lines (structlog, on fd 1) stay out of the --json output."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _no_metadata_db() -> str:
    """Why the Variable and the connections cannot be read from Airflow's metadata DB ('' when
    they can): a shell without the workers' AIRFLOW_HOME gets Airflow's default home, whose
    DB has no tables (Airflow then logged a traceback per lookup)."""
    from airflow import settings
    from sqlalchemy import inspect

    home = os.environ.get("AIRFLOW_HOME", "~/airflow (AIRFLOW_HOME is not set)")
    try:
        if inspect(settings.engine).has_table("variable"):
            return ""
        found = "has no Airflow tables"
    except Exception as e:  # noqa: BLE001 - any failure to reach the DB is said, in one line
        found = f"cannot be read ({type(e).__name__})"
    return (f"Airflow's metadata DB {settings.engine.url.render_as_string(hide_password=True)} {found}; "
            f"AIRFLOW_HOME is {home}: run it with the workers' AIRFLOW_HOME (this project's: "
            f"export AIRFLOW_HOME=$PWD/.dev/airflow after `make setup`)")


def main(argv: list[str] | None = None) -> int:
    from seglake.cli import emit
    from seglake.settings_sources import table as source_table

    parser = argparse.ArgumentParser(prog="seglake config show --airflow")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with _stdout_to_stderr():
        if why := _no_metadata_db():
            print(f"seglake config show: error: {why}", file=sys.stderr)
            return 1
        from airflow.models.connection import Connection
        from airflow.models.variable import Variable

        from seglake_airflow.hooks.engine import SeglakeHook

        def connection(conn_id: str):   # secrets backends, then the metadata DB (the SDK sees no DB here)
            try:
                return Connection.get_connection_from_secrets(conn_id)
            except Exception:  # noqa: BLE001 - not defined: the layers below apply
                return None

        hook = SeglakeHook(quiet=True, get_connection=connection,
                           get_variable=lambda name: Variable.get(name, default_var=None))
        rows = source_table(hook.settings, hook.sources)
    data = {"settings": {r["key"]: r["value"] for r in rows}, "sources": {r["key"]: r["source"] for r in rows},
            "airflow_home": os.environ.get("AIRFLOW_HOME", "~/airflow")}
    emit(args, data, rows, ["key", "value", "source"])
    if not args.json:
        print(f"\n(AIRFLOW_HOME {data['airflow_home']}: a DAG run uses etcd {hook.settings.etcd_endpoint} "
              f"root {hook.settings.etcd_root!r} and store {hook.settings.store_uri})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
