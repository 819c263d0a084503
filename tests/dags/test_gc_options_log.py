"""The first lines of every gc run: the effective options and where each came from
(Param, Param default, config layer), from the real check_conf task under dag.test()."""

import json

import pytest
from dag_helpers import load_dag, task_states

pytestmark = pytest.mark.airflow


def test_gc_run_logs_effective_options_and_their_sources(airflow_env, meta, store, monkeypatch, capfd):
    monkeypatch.setenv("AIRFLOW_VAR_SEGLAKE_CONFIG", json.dumps({"store_uri": airflow_env.store_uri,
                                                                 "missing_tolerance": "2d"}))
    monkeypatch.setenv("SEGLAKE_TOLERANCE_FLOOR", "2h")
    run = load_dag("gc").test(run_conf={"dry_run": True, "drop_tolerance_hours": 5, "engine": "inline"})
    assert run.state == "success", task_states(run)
    out = capfd.readouterr()
    text = out.out + out.err
    start = text.index("gc options (manual run")
    block = text[start:start + 1500]
    assert "dry_run = true" in block and "[Param]" in block.split("\n")[1]
    assert "scope = whole store" in block and "[Param default]" in block.splitlines()[2]
    assert "missing_tolerance = 172800 s (48 h 00 min)" in block and "[config: Variable seglake_config]" in block
    assert "drop_tolerance = 18000 s (5 h 00 min)" in block and "[Param drop_tolerance_hours]" in block
    assert "tolerance_floor = 7200 s (2 h 00 min)" in block and "[config: environment]" in block
    assert f"root {airflow_env.etcd_root!r} [connection etcd_default]" in block
    assert "REAL run" not in block
    assert text.index("gc options") < text.index("referenced files")      # before the prepare step


def test_options_of_a_scheduled_real_run_warn_it_deletes():
    from seglake.config import Settings
    from seglake.runinfo import gc_options_lines

    conf = {"dry_run": False, "collection": None, "db": "default", "missing_tolerance_hours": None,
            "drop_tolerance_hours": 6, "force": False, "engine": "auto"}
    record = {"conf": conf, "set_at": 0, "set_by": "ops"}
    lines = gc_options_lines(conf, {}, Settings(), {}, "scheduled", record)
    assert lines[0] == ("gc options (scheduled run; the settings `seglake gc schedule set` recorded at "
                        "1970-01-01 00:00:00 UTC by ops):")
    assert "dry_run = false" in lines[1] and "REAL run" in lines[1] and "[schedule record]" in lines[1]
    assert "missing_tolerance = 86400 s (24 h 00 min)" in lines[3] and "[config: default]" in lines[3]
    assert "drop_tolerance = 21600 s (6 h 00 min)" in lines[4] and "[schedule record drop_tolerance_hours]" in lines[4]
