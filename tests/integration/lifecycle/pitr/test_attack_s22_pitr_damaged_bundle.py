"""attack-s22: a restore to a time / an undrop from the backup target whose base bundle has
a data file damaged in place (one byte flipped, same size) is refused, never restored
with the damaged rows; and leaves no usable (Created) target."""

from __future__ import annotations

import pytest

from seglake.errors import SeglakeError
from seglake.lifecycle import retention, snapshot
from seglake.lifecycle.backup import archive
from seglake.lifecycle.backup import export as exports
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, restore_from_target, rows, visible_of


def test_a_restore_from_a_target_with_a_damaged_bundle_file_is_refused(meta, store, settings, tmp_path):
    backup = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 50), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, backup, "src", "s1", say=lambda line: None)
        retention.set_policy(meta, "src", {"keep_last": 5, "archive": True})
        model.record(c.insert("src", rows(range(50, 60), 2.0)), 2.0)
        t = meta.tso.reserve(1, linearizable=True)
        archive.run(meta, store, backup)
    files = sorted(p for p in (tmp_path / "backup").rglob("*") if p.is_file() and "archive" not in p.parts
                   and p.suffix not in (".json",) and p.stat().st_size > 64)
    print("bundle files:", [str(p.relative_to(tmp_path / "backup")) for p in files][:10])
    for victim in (p for p in files if "data" in p.parts):   # every data file, one byte flipped in place
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0x01
        victim.write_bytes(bytes(data))
    try:
        target = restore_from_target(meta, store, settings, backup, "src", "x", t)
    except (SeglakeError, AssertionError) as e:
        print("refused:", type(e).__name__, str(e)[:300])
        made = [x for x in meta.catalog.list(include_dropped=True) if x.name == "x"]
        for x in made:
            jid = x.properties.get("restore_job_id")
            if jid is not None:
                job = meta.copyjobs.get(int(jid))[0]
                print("target", x.state, "job", job.state, str(job.reason)[:300])
        assert all(x.state != "Created" for x in made), made
        return
    got = visible_of(meta, store, target)
    pytest.fail(f"restored from a damaged bundle: {target.state}, rows equal the model: {got == model.visible(t)}")
