"""Which layer set each setting: what an operator needs to see which etcd and store a
DAG run uses (`seglake config show --airflow`) and where GC's tolerances came from.

Layers, later wins (the same order as SeglakeHook and `Settings.load`): `default`,
`environment` (SEGLAKE_CONFIG / SEGLAKE_<KEY>), `Variable seglake_config`, then named
layers (Airflow connections), then `run` (per-run overrides). Values are never returned
here, only where they came from: the caller shows `Settings.to_public()` (secrets masked).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from seglake.config import VARIABLE_NAME, Settings, _parse_json

VARIABLE_LAYER = f"Variable {VARIABLE_NAME}"


def resolve(variable: str | Mapping[str, Any] | None = None,
            layers: Sequence[tuple[str, Mapping[str, Any]]] = (),
            overrides: Mapping[str, Any] | None = None,
            env: Mapping[str, str] | None = None) -> tuple[Settings, dict[str, str]]:
    """(settings, {key: layer}) with every layer validated as Settings.load does."""
    env = os.environ if env is None else env
    base = Settings.load(variable=variable, env=env)
    sources = {k: "default" for k in Settings.keys()}
    sources.update({k: "environment" for k in Settings.from_env(env, validate=False)})
    if variable:
        sources.update({k: VARIABLE_LAYER for k in _parse_json(VARIABLE_LAYER, variable)})
    layered: dict[str, Any] = {}
    for name, values in layers:
        layered.update(values)
        sources.update({k: name for k in values})
    overrides = dict(overrides or {})
    sources.update({k: "run" for k in overrides})
    return base.replace(**layered, **overrides), sources


def table(settings: Settings, sources: Mapping[str, str]) -> list[dict[str, Any]]:
    """Rows {key, value, source}; secret values masked (set/unset only)."""
    return [{"key": k, "value": v, "source": sources.get(k, "default")} for k, v in settings.to_public().items()]
