"""Adversary s24: every persisted record (etcd values, JSON on the store or a backup target)
is read by ONE strict reader, seglake.meta.codec.loads (NaN, Infinity and 1e400 refused:
Python's json reads them, and NaN compares false both ways -- a pin's NaN expiry read as
expired). New code gets it by default: a json.loads in the engine fails this test unless it
parses something that is not a record of ours (listed here, with why)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "include" / "seglake"
NOT_RECORDS = {   # path (under include/seglake) -> why json.loads is right there
    "config.py": "loads_strict itself: inputs, with its own NaN/overflow/duplicate-key refusal",
    "dev/cluster.py": "development tooling: its own state file and HTTP answers",
    "dev/milvus.py": "development tooling: its own state file and a subprocess's output",
    "milvus/client.py": "the Milvus helper process's answers (a pipe, not a record)",
    "milvus/binlog.py": "a JSON value inside a Milvus binlog (user data)",
    "milvus/catalog.py": "Milvus's own etcd (its Version field), not seglake's records",
    "milvus/restore.py": "an index's extra params given as JSON text, and JSON field values (user data)",
    "lifecycle/compaction/policies.py": "the --targets CLI input (every name and number checked after)",
}


def _json_loads_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), str(path))
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "loads" and isinstance(n.func.value, ast.Name) and n.func.value.id == "json"]


def test_no_persisted_record_is_read_with_json_loads():
    found = {}
    for path in sorted(ENGINE.rglob("*.py")):
        rel = path.relative_to(ENGINE).as_posix()
        lines = _json_loads_calls(path)
        if lines and rel not in NOT_RECORDS:
            found[rel] = lines
    assert not found, (f"json.loads in {found}: read a persisted record with seglake.meta.codec.loads (and "
                       f"codec.number/moment for its numbers), or list the file in NOT_RECORDS with why")


def test_the_allowlist_names_only_files_that_still_need_it():
    stale = [rel for rel in NOT_RECORDS if not (ENGINE / rel).exists() or not _json_loads_calls(ENGINE / rel)]
    assert not stale, f"no json.loads left in {stale}: remove them from NOT_RECORDS"


@pytest.mark.parametrize("raw", [b'{"a": NaN}', b'{"a": Infinity}', b'{"a": -Infinity}', b'{"a": 1e400}'])
def test_python_json_reads_them_and_the_record_reader_does_not(raw):
    import json
    import math

    from seglake.errors import CorruptRecord
    from seglake.meta import codec

    assert not math.isfinite(json.loads(raw)["a"])
    with pytest.raises(CorruptRecord):
        codec.loads(raw, "k")
