"""The contract of every DAG's conf (seglake.contract) as Airflow Params: the form
Airflow validates a UI or REST conf against before a run exists. The only Airflow-
specific part of the contract."""

from __future__ import annotations

from typing import Any

from seglake.contract import Key
from seglake.names import NAME_PATTERN
from seglake.limits import LIMITS

# Not a switch: a nullable boolean shows as "off" in Airflow's form and sends null. A
# dropdown of three labelled choices shows what is sent (the form draws a dropdown for
# an enum whose first non-null type is "string"; the enum admits only null/true/false).
DEFERRABLE_DISPLAY = {"null": "worker default ([operators] default_deferrable)",
                      "true": "deferrable (in the triggerer)", "false": "reschedule mode (no triggerer)"}


def param_schema(key: Key) -> dict[str, Any]:
    """A contract key as Airflow Param kwargs (JSON schema + title/description; no
    default: the caller adds it unless the key is required)."""
    base = {"name": "string", "text": "string", "number": "number", "integer": "integer",
            "boolean": "boolean", "enum": "string", "location": "string"}.get(key.kind)
    if key.kind == "tristate":   # see DEFERRABLE: a labelled dropdown, not a switch
        return {"type": ["null", "string", "boolean"], "enum": [None, True, False], "title": key.title,
                "values_display": DEFERRABLE_DISPLAY, "description": key.help()}
    out: dict[str, Any] = {"type": ["null", base] if key.nullable else base, "title": key.title}
    out["description"] = key.help()
    if key.kind == "name":
        out["pattern"] = NAME_PATTERN
    elif key.kind in ("text", "location"):
        out["maxLength"] = key.max_length
    elif key.kind == "enum":
        out["enum"] = [*([None] if key.nullable else []), *key.choices]
    elif key.kind in ("number", "integer"):
        out.update(LIMITS[key.limit].schema(key.scale))
    return out
