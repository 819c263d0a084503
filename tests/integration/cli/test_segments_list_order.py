"""`seglake segments list` lists by partition, then segment id as a number: it listed in
etcd's key order, which is textual (1577, 20001, 30001, 4, 40001 in one partition)."""

from __future__ import annotations

import json

from seglake import cli
from seglake.dev import demo


def test_segments_are_listed_by_partition_then_numeric_id(meta, store, settings, monkeypatch, capsys):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    coll, _ = demo.seed(meta, store, demo.SeedParams(name="ord", partitions=2, segments=12, rows=5, dim=2))
    assert cli.main(["segments", "list", "ord", "--json"]) == 0
    got = [(s["partition_id"], s["segment_id"]) for s in json.loads(capsys.readouterr().out)]
    assert len(got) == 24 and got == sorted(got)
    assert len({len(str(i)) for _, i in got}) > 1   # ids of more than one digit count: text order differs
    assert cli.main(["segments", "list", "ord"]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    assert [int(line.split()[0]) for line in lines] == [i for _, i in got]
