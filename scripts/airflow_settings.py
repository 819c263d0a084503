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


def convert(doc: dict) -> tuple[dict, dict, dict]:
    air = (doc or {}).get("airflow") or {}
    conns = {}
    for c in air.get("connections") or []:
        entry = {"conn_type": c["conn_type"]}
        for src, dst in (("conn_host", "host"), ("conn_schema", "schema"), ("conn_login", "login"),
                         ("conn_password", "password"), ("conn_port", "port"), ("conn_description", "description")):
            if c.get(src) not in (None, ""):
                entry[dst] = c[src]
        extra = c.get("conn_extra")
        if extra:
            entry["extra"] = json.dumps(extra) if isinstance(extra, dict) else str(extra)
        conns[c["conn_id"]] = entry
    variables = {v["variable_name"]: v["variable_value"] for v in air.get("variables") or []}
    pools = {p["pool_name"]: {"slots": int(p["pool_slot"]), "description": p.get("pool_description", ""),
                              "include_deferred": False}
             for p in air.get("pools") or []}
    return conns, variables, pools


def main(argv: list[str]) -> int:
    src, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    conns, variables, pools = convert(yaml.safe_load(src.read_text()))
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
