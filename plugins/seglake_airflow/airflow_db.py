"""The busy timeout of the SQLite Airflow the project starts (`make up`, `make demo`, the
e2e tests): Airflow reads it through `[database] sql_alchemy_connect_args` (and `..._async`),
an import path to a dict of the database driver's connect arguments.

SQLite lets one writer in at a time; a writer that finds the database locked waits at most
the driver's `timeout` (5 s by default) and then fails with "database is locked", which the
API server answers with a 500. On a loaded 2-core machine the scheduler holds the lock
longer than that at times (CI, stop 42: `PATCH /api/v2/dags/wal_archive` got a 500), so an
operator's unpause or trigger failed at random. 60 s makes such a call wait instead.

Only for SQLite: the dict is empty for any other database (psycopg2 and the MySQL drivers
have no `timeout` argument), so pointing a production Airflow's settings here is harmless.
"""

from __future__ import annotations

from airflow.configuration import conf

SQLITE_BUSY_TIMEOUT_S = 60.0


def _connect_args(url: str) -> dict:
    return {"timeout": SQLITE_BUSY_TIMEOUT_S} if url.startswith("sqlite") else {}


_SYNC = conf.get("database", "sql_alchemy_conn", fallback="") or ""
CONNECT_ARGS = _connect_args(_SYNC)
# Airflow derives the async URL from the sync one unless it is set (aiosqlite passes the
# argument on to sqlite3.connect)
CONNECT_ARGS_ASYNC = _connect_args(conf.get("database", "sql_alchemy_conn_async", fallback="") or _SYNC)
