"""attack s22: a bundle damaged in the target (a data file zero-length, truncated or
with one bit flipped in place; bundle.json flipped) before an import and before a
restore from the bundle: refused with a clear engine error, no COMMITTED snapshot and no
usable collection from it, no row served; once the file is put back, a re-run completes
with exactly the source's rows."""

import uuid

import pytest
from fault_harness import price_rows as _rows
from fault_harness import seed_and_snapshot

from seglake.config import Settings
from seglake.errors import SeglakeError
from seglake.lifecycle import copyjob, restore
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import bundle_restore, export, imports
from seglake.meta import Meta
from seglake.storage import layout, open_store
from seglake.storage.local import LocalStore

quiet = dict(say=lambda line: None)




def _damage(path, how):
    data = open(path, "rb").read()
    if how == "zero":
        new = b""
    elif how == "truncate":
        new = data[: len(data) - 7]
    else:
        b = bytearray(data)
        b[len(b) // 2] ^= 0x10
        new = bytes(b)
    open(path, "wb").write(new)
    return data


def _victim(path, doc, which):
    """The local path of the file to damage: the insert log of field 102 of some segment,
    a stats log, or bundle.json itself."""
    if which == "doc":
        return path / layout.bundle_doc("default", "demo", "s1")
    want = "/102/" if which == "insert" else "stats_log/"
    (f,) = [f for k, f in sorted(doc["files"].items()) if want in k][:1]
    return path / layout.bundle_blob(f["sha256"])


@pytest.mark.parametrize("how", ["zero", "truncate", "flip"])
@pytest.mark.parametrize("which", ["insert", "stats", "doc"])
@pytest.mark.parametrize("op", ["import", "restore"])
def test_a_damaged_bundle_file_is_refused_and_a_repaired_one_completes(meta, store, etcd_server, tmp_path,
                                                                      how, which, op):
    seed_and_snapshot(meta, store)
    want = _rows(meta, store, "demo")
    path = tmp_path / "backup"
    target = LocalStore(path)
    export.export(meta, store, target, "demo", "s1", **quiet)
    doc = bundles.read(target, "default", "demo", "s1")
    victim = _victim(path, doc, which)
    orig = _damage(victim, how)
    other = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": f"dr{uuid.uuid4().hex[:8]}",
                                "store_uri": str(tmp_path / "dr"), "etcd_timeout": 5})
    with Meta.from_settings(other) as meta2:
        store2 = open_store(other)

        def run():
            if op == "import":
                imports.import_bundle(meta2, store2, LocalStore(path), "demo", "s1", **quiet)
                job = restore.restore(meta2, store2, "demo", "s1", "demo_r")
            else:
                job = bundle_restore.restore_from_bundle(meta2, store2, LocalStore(path), "demo", "s1", "demo_r",
                                                         engine="inline", **quiet)["job_id"]
            copyjob.plan(meta2, job)
            copyjob.run_inline(meta2, store2, job)
            return copyjob.finalize(meta2, job)

        try:
            job = run()
            refused = job.state != "Completed"
        except SeglakeError as e:
            refused, job = True, None
            print("refused:", type(e).__name__, str(e)[:200])
        assert refused, f"a bundle with {victim.name} {how} was imported/restored: {job}"
        assert not [s for s in meta2.snapshots.list() if s.state == "COMMITTED"], "a COMMITTED snapshot of it"
        for c in meta2.catalog.list("default"):
            assert c.state != "Created", f"collection {c.name} usable from a damaged bundle"
        open(victim, "wb").write(orig)          # the operator puts the file back
        job = run() if op == "import" or job is None else None
        if job is None:                          # a restore's failed job: a new restore under a new name
            job_id = bundle_restore.restore_from_bundle(meta2, store2, LocalStore(path), "demo", "s1", "demo_r2",
                                                        engine="inline", **quiet)["job_id"]
            copyjob.plan(meta2, job_id)
            copyjob.run_inline(meta2, store2, job_id)
            job = copyjob.finalize(meta2, job_id)
        assert job.state == "Completed", job
        assert _rows(meta2, store2, job.target_collection) == want
