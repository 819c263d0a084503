"""Airflow glue for seglake: hooks (connections -> engine clients), operators, sensors,
triggers. Thin: every decision lives in the `seglake` engine."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SPARK_JOBS = PROJECT_ROOT / "spark" / "jobs"


def spark_job(name: str) -> str:
    """Absolute path of a PySpark entry point in spark/jobs/."""
    path = SPARK_JOBS / f"{name}.py"
    return os.fspath(path)
