import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from airflow_settings import convert  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def test_project_settings_convert_to_native_import_format():
    conns, variables, pools = convert(yaml.safe_load((REPO / "airflow_settings.yaml").read_text()))
    assert conns["spark_default"] == {"conn_type": "spark", "host": "local[*]",
                                      "extra": json.dumps({"deploy-mode": "client"})}
    assert conns["etcd_default"]["port"] == 23790
    assert json.loads(variables["seglake_config"])["max_segments_per_task"] == 10
    assert pools["seglake_spark"]["slots"] == 2


def test_the_shipped_variable_is_valid_config():
    from seglake.config import Settings

    _, variables, _ = convert(yaml.safe_load((REPO / "airflow_settings.yaml").read_text()))
    Settings.load(variable=variables["seglake_config"], env={})
