"""atk-s25-edges F10: airflow_settings.yaml (loaded by `make setup`) took what it did not
know silently: a misspelt `conn_host` dropped the host (etcd_default then fell back to
127.0.0.1:23790), `conections:` imported no connection, a conn_id or a key given twice kept
the last, a seglake_config Variable every run would refuse was imported, `pool_slot: 2.5`
was a traceback. Each is refused now, naming it, and nothing is imported."""

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from airflow_settings import SettingsError, convert, load  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
GOOD_CONN = "    - conn_id: etcd_default\n      conn_type: etcd\n      conn_host: 127.0.0.1\n      conn_port: 23790\n"


@pytest.mark.parametrize("text, said", [
    ("airflow:\n  connections:\n    - conn_id: etcd_default\n      conn_type: etcd\n      conn_hsot: 10.0.0.5\n",
     "airflow.connections[0]: unknown key 'conn_hsot' (did you mean 'conn_host'?)"),
    ("airflow:\n  conections:\n" + GOOD_CONN, "airflow: unknown key 'conections' (did you mean 'connections'?)"),
    ("airlfow:\n  connections: []\n", "airflow_settings.yaml: unknown key 'airlfow' (did you mean 'airflow'?)"),
    ("airflow:\n  connections:\n" + GOOD_CONN + GOOD_CONN,
     "airflow.connections: conn_id: 'etcd_default' is given more than once"),
    ("airflow:\n  connections:\n" + GOOD_CONN + "      conn_port: 2379\n", "key 'conn_port' is given more than once"),
    ("airflow:\n  connections:\n    - conn_id: etcd_default\n      conn_type: etcd\n      conn_port: 99999\n",
     "connection 'etcd_default': conn_port 99999 is not a port 1..65535"),
    ("airflow:\n  variables:\n    - variable_name: seglake_config\n      variable_value: '{\"copy_thread\": 4}'\n",
     "variable 'seglake_config': unknown config key 'copy_thread' (did you mean 'copy_threads'?)"),
    ("airflow:\n  pools:\n    - pool_name: seglake_spark\n      pool_slot: 2.5\n",
     "pool 'seglake_spark': pool_slot 2.5 is not an integer 1..10000"),
    ("airflow:\n  pools:\n    - pool_name: seglake_spark\n      pool_slots: 2\n",
     "airflow.pools[0]: unknown key 'pool_slots' (did you mean 'pool_slot'?)"),
], ids=["conn-key-typo", "section-typo", "top-typo", "conn-twice", "yaml-key-twice", "port", "variable", "slots",
        "pool-key-typo"])
def test_a_settings_file_with_a_typo_is_refused_naming_it(text, said):
    with pytest.raises(SettingsError) as e:
        convert(load(text))
    assert said in str(e.value), str(e.value)


def test_the_script_imports_nothing_and_exits_2(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("airflow:\n  connections:\n    - conn_id: etcd_default\n      conn_type: etcd\n"
                   "      conn_hsot: 10.0.0.5\n")
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "airflow_settings.py"), str(bad), str(tmp_path / "out"),
                        "--import"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "did you mean 'conn_host'?" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "out" / "connections.json").exists()


def test_the_shipped_file_still_converts():
    conns, variables, pools = convert(load((REPO / "airflow_settings.yaml").read_text()))
    assert set(conns) == {"etcd_default", "spark_default", "aws_default"} and pools["seglake_spark"]["slots"] == 2
