"""`seglake milvus pin` says until when in UTC (it printed the expiry as unix seconds:
'pinned until 1796009383'). The bundle is a seglake export: a pin does not depend on the
bundle's kind."""

from __future__ import annotations

import re
import time

from seglake import cli
from seglake.dev import demo
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import export as exports
from seglake.progress import utc_time
from seglake.storage.local import LocalStore


def test_milvus_pin_says_the_expiry_as_a_utc_time(meta, store, settings, tmp_path, monkeypatch, capsys):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    demo.seed(meta, store, demo.SeedParams(name="pp", partitions=1, segments=1, rows=20, dim=4))
    target = LocalStore(tmp_path / "backup")
    snapshot.create(meta, store, "pp", "s1")
    exports.export(meta, store, target, "pp", "s1", say=lambda line: None)
    before = time.time()
    rc = cli.main(["milvus", "pin", "pp", "s1", "--ttl-hours", "2", "--target", str(tmp_path / "backup")])
    out = capsys.readouterr().out.strip()
    assert rc == 0
    m = re.fullmatch(r"pp/s1 pinned until (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC)", out)
    assert m, out
    assert m.group(1) in {utc_time(before + 7200 + d) for d in range(0, 5)}, out
