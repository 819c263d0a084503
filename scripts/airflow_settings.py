"""Convert an Astronomer `airflow_settings.yaml` into the files Airflow's own import
commands take, then (with --import) run them:

    python scripts/airflow_settings.py airflow_settings.yaml OUT_DIR [--import]

`airflow connections import` and `variables import` cannot read the Astronomer format
(wrong keys, silently wrong values), and `pools import` takes JSON only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml


class SettingsError(ValueError):
    """One sentence naming what in airflow_settings.yaml is refused (nothing is imported)."""


# the Astronomer format's keys; anything else is a typo, refused naming the closest one (a
# misspelt `conn_host` dropped the host: etcd_default then fell back to 127.0.0.1:23790)
TOP_KEYS = ("airflow",)
SECTION_KEYS = ("connections", "pools", "variables")
CONN_KEYS = ("conn_id", "conn_type", "conn_host", "conn_schema", "conn_login", "conn_password", "conn_port",
             "conn_extra", "conn_description")
VARIABLE_KEYS = ("variable_name", "variable_value")
POOL_KEYS = ("pool_name", "pool_slot", "pool_description")


def _keys(where: str, doc, valid: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
    import difflib

    if not isinstance(doc, dict):
        raise SettingsError(f"{where}: expected a mapping, got {type(doc).__name__}")
    for key in doc:
        if key not in valid:
            near = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
            raise SettingsError(f"{where}: unknown key {key!r}" + (f" (did you mean {near[0]!r}?)" if near else
                                                                  f"; valid keys: {', '.join(valid)}"))
    for key in required:
        if doc.get(key) in (None, ""):
            raise SettingsError(f"{where}: {key!r} is required")
    return doc


def _list(where: str, value) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SettingsError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _unique(where: str, names: list) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise SettingsError(f"{where}: {n!r} is given more than once")
        seen.add(n)


def convert(doc: dict) -> tuple[dict, dict, dict]:
    air = _keys("airflow_settings.yaml", doc or {}, TOP_KEYS).get("airflow") or {}
    air = _keys("airflow", air, SECTION_KEYS)
    conns = {}
    items = [_keys(f"airflow.connections[{i}]", c, CONN_KEYS, ("conn_id", "conn_type"))
             for i, c in enumerate(_list("airflow.connections", air.get("connections")))]
    _unique("airflow.connections: conn_id", [c["conn_id"] for c in items])
    for c in items:
        entry = {"conn_type": c["conn_type"]}
        for src, dst in (("conn_host", "host"), ("conn_schema", "schema"), ("conn_login", "login"),
                         ("conn_password", "password"), ("conn_port", "port"), ("conn_description", "description")):
            if c.get(src) not in (None, ""):
                entry[dst] = c[src]
        if "port" in entry and (isinstance(entry["port"], bool) or not isinstance(entry["port"], int)
                                or not 1 <= entry["port"] <= 65535):
            raise SettingsError(f"connection {c['conn_id']!r}: conn_port {entry['port']!r} is not a port 1..65535")
        extra = c.get("conn_extra")
        if extra:
            entry["extra"] = json.dumps(extra) if isinstance(extra, dict) else str(extra)
        conns[c["conn_id"]] = entry
    items = [_keys(f"airflow.variables[{i}]", v, VARIABLE_KEYS, ("variable_name",))
             for i, v in enumerate(_list("airflow.variables", air.get("variables")))]
    _unique("airflow.variables: variable_name", [v["variable_name"] for v in items])
    variables = {v["variable_name"]: v.get("variable_value") for v in items}
    if "seglake_config" in variables:   # what every run would refuse, refused before it is imported
        from seglake.config import Settings
        from seglake.errors import ConfigError
        try:
            Settings.load(variable=variables["seglake_config"], env={})
        except ConfigError as e:
            raise SettingsError(f"variable 'seglake_config': {e}") from None
    items = [_keys(f"airflow.pools[{i}]", p, POOL_KEYS, ("pool_name", "pool_slot"))
             for i, p in enumerate(_list("airflow.pools", air.get("pools")))]
    _unique("airflow.pools: pool_name", [p["pool_name"] for p in items])
    for p in items:
        slots = p["pool_slot"]
        if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= 10_000:
            raise SettingsError(f"pool {p['pool_name']!r}: pool_slot {slots!r} is not an integer 1..10000")
    pools = {p["pool_name"]: {"slots": p["pool_slot"], "description": p.get("pool_description", ""),
                              "include_deferred": False}
             for p in items}
    return conns, variables, pools


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load keeps the last of a key given twice, silently: refused here."""


def _mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise SettingsError(f"airflow_settings.yaml line {key_node.start_mark.line + 1}: key {key!r} is given "
                                f"more than once")
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load(text: str):
    """The YAML document, a key given twice in one mapping refused."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def main(argv: list[str]) -> int:
    src, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    try:
        conns, variables, pools = convert(load(src.read_text()))
    except SettingsError as e:
        print(f"airflow settings: refused, nothing imported: {e}", file=sys.stderr)
        return 2
    files = {"connections": conns, "variables": variables, "pools": pools}
    for name, data in files.items():
        (out / f"{name}.json").write_text(json.dumps(data, indent=2))
    if "--import" in argv:
        airflow = str(Path(sys.executable).parent / "airflow")
        cmds = [[airflow, "connections", "import", "--overwrite", str(out / "connections.json")],
                [airflow, "variables", "import", "--action-on-existing-key", "overwrite", str(out / "variables.json")],
                [airflow, "pools", "import", str(out / "pools.json")]]
        for cmd in cmds:
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    print(f"airflow settings: {len(conns)} connections, {len(variables)} variables, {len(pools)} pools")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
