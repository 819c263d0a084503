"""Issue 30 item 3: the WAL archive SIGKILLed after a fragment is written but before its
entry, and right after an entry, at the first / a middle / the last fragment; the re-run
converges: the target reads back exactly the log's messages, every entry names a
complete fragment, the cursor reaches the log's end, nothing is shipped twice."""

import pytest

from seglake.lifecycle import retention
from seglake.lifecycle.backup import archive
from seglake.storage import layout
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.log import WalLog

SCHEMA = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
          {"field_id": 101, "name": "vec", "dtype": "FloatVector", "dim": 4}]


def _key(m):
    return m.id, m.type, m.time_tick, m.producer


@pytest.mark.parametrize("point", ["archive.after_fragment", "archive.after_entry"])
@pytest.mark.parametrize("at", [0.0, 0.5, 1.0])
def test_a_killed_archive_run_is_finished_by_the_next(meta, store, settings, spawn, tmp_path, point, at):
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("arch", SCHEMA, shards=1)
        for i in range(8):
            c.insert("arch", synthetic_rows(coll, 10, 1 + 10 * i))
    retention.set_policy(meta, "arch", {"keep_last": 1, "archive": True})
    (p,) = archive.archived_pchannels(meta)
    last = WalLog(meta, store, p).state().last
    k = min(last, 1 + int((last - 1) * at))
    path = tmp_path / "backup"
    child = spawn("wal_archive", {"target": str(path)}, settings, faults=f"{point}:kill@{k}")
    assert child.wait(120).rc == -9
    target = LocalStore(path)
    site = archive.site_id(meta)
    for n in archive.ArchivedLog(target, site, p).numbers():      # an entry always names a whole fragment
        assert target.head(layout.archive_fragment(site, p, n)).size == archive.read_entry(target, site, p, n)["size"]
    assert archive.read_cursor(meta, p).shipped < last or (point == "archive.after_entry" and k == last)
    r = archive.run(meta, store, target)
    assert r["pchannels"][p]["cursor"] == last
    shipped_before = k if point == "archive.after_entry" else k - 1
    assert r["fragments"] <= last - shipped_before + archive.SHIP_BATCH
    live = [_key(m) for m in WalLog(meta, store, p).messages()]
    assert [_key(m) for m in archive.ArchivedLog(target, site, p).messages()] == live
    assert archive.ArchivedLog(target, site, p).numbers() == list(range(1, last + 1))
