"""Engine steps the fault suite runs in a child process, so a test can SIGKILL it.

    python steps.py STEP JSON_ARGS

Settings come from the environment (SEGLAKE_CONFIG, SEGLAKE_*), fault points from
SEGLAKE_FAULTS. Exit 0 prints the step's JSON result on stdout; an engine error
(SeglakeError: the "clear error" a fault case accepts) exits 3 with
`SeglakeError <Type>: <message>` on stderr; anything else is a crash (traceback, exit 1).
"""

from __future__ import annotations

import json
import sys
import time


def restore_all(meta, store, settings, a: dict) -> dict:
    """The whole restore as one driver: restore -> plan -> copy -> finalize."""
    from seglake.lifecycle import restore

    job_id = restore.restore(meta, store, a["collection"], a["snapshot"], a["target"], owner=a.get("owner", ""))
    return _drive(meta, store, settings, job_id, a)


def redrive(meta, store, settings, a: dict) -> dict:
    """What copy_segment_job does for a job id: plan (idempotent) -> copy -> finalize."""
    return _drive(meta, store, settings, a["job_id"], a)


def _drive(meta, store, settings, job_id: int, a: dict) -> dict:
    from seglake.lifecycle import copyjob

    copyjob.plan(meta, job_id, a.get("per_task", 3))
    workers = a.get("workers", 1)
    if workers > 1:
        from seglake.lifecycle.copyjob import running
        running.PARALLEL_MIN_FILES = 0  # small test data, but the worker-process engine
    copyjob.run_inline(meta, store, job_id, threads=a.get("threads", 1),
                       settings=settings if workers > 1 else None, workers=workers)
    job = copyjob.finalize(meta, job_id)
    return {"job_id": job_id, "state": job.state, "reason": job.reason, "total_rows": job.total_rows}


def pitr_restore(meta, store, settings, a: dict) -> dict:
    """A restore to a time, the whole way: set up -> copy job -> replay -> Created."""
    from seglake.lifecycle import pitr

    job_id = pitr.restore_as_of(meta, store, a["collection"], a["target"], a["as_of"])
    out = _drive(meta, store, settings, job_id, a)
    return {**out, **pitr.replay(meta, store, settings, meta.catalog.get_by_name(a["target"]).collection_id)}


def pitr_restore_from_target(meta, store, settings, a: dict) -> dict:
    """A restore to a time from a backup target alone, the whole way (attack-archive)."""
    from seglake.lifecycle import pitr
    from seglake.lifecycle.pitr import from_target
    from seglake.storage.local import LocalStore

    job_id = from_target.restore_as_of_from_target(meta, store, LocalStore(a["backup"]), a["collection"],
                                                   a["target"], a["as_of"])
    out = _drive(meta, store, settings, job_id, a)
    return {**out, **pitr.replay(meta, store, settings, meta.catalog.get_by_name(a["target"]).collection_id)}


def pitr_undrop(meta, store, settings, a: dict) -> dict:
    """An undrop (from this store, or with `backup`: falling back to / from the backup
    target, `bundle` named or not), the whole way."""
    from seglake.lifecycle import pitr
    from seglake.storage.local import LocalStore

    job_id = pitr.undrop(meta, store, a["collection"], a["target"],
                         backup=LocalStore(a["backup"]) if a.get("backup") else None, bundle=a.get("bundle"))
    out = _drive(meta, store, settings, job_id, a)
    return {**out, **pitr.replay(meta, store, settings, meta.catalog.get_by_name(a["target"]).collection_id)}


def backup_export(meta, store, settings, a: dict) -> dict:
    from seglake.lifecycle.backup import export
    from seglake.storage.local import LocalStore

    r = export.export(meta, store, LocalStore(a["target"]), a["collection"], a["snapshot"], threads=1,
                      say=lambda line: None)
    return {"state": r["state"], "copied_files": r["copied_files"]}


def backup_import(meta, store, settings, a: dict) -> dict:
    """Import a bundle as a snapshot of this store."""
    from seglake.lifecycle.backup import imports
    from seglake.storage.local import LocalStore

    r = imports.import_bundle(meta, store, LocalStore(a["target"]), a["collection"], a["bundle"], threads=1,
                              say=lambda line: None)
    return {"snapshot_id": r["snapshot_id"], "copied_files": r["copied_files"]}


def backup_restore(meta, store, settings, a: dict) -> dict:
    """Restore a bundle, the whole way (its copy job driven inline)."""
    from seglake.lifecycle.backup import bundle_restore
    from seglake.storage.local import LocalStore

    out = bundle_restore.restore_from_bundle(meta, store, LocalStore(a["target"]), a["collection"], a["bundle"],
                                      a["restore_to"], engine="inline", say=lambda line: None)
    return _drive(meta, store, settings, out["job_id"], a)


def snapshot_create(meta, store, settings, a: dict) -> dict:
    from seglake.lifecycle import snapshot

    rec = snapshot.create(meta, store, a["collection"], a["name"], owner=a.get("owner", ""),
                          per_file=a.get("per_file", 2))
    return {"state": rec.state, "segments": rec.segments, "rows": rec.rows}


def gc_run(meta, store, settings, a: dict) -> dict:
    """gc.run with the given options; `delete_delay` slows every object delete (so a
    test can act mid-sweep) without changing what is deleted."""
    from seglake.lifecycle import gc

    delay = a.get("delete_delay", 0)
    if delay:  # every delete path (delete_many included) goes through delete_checked
        from seglake.storage.base import DeleteOutcome

        real = store.delete_checked

        def slow(objects):
            out = DeleteOutcome()
            for o in list(objects):
                time.sleep(delay)
                one = real([o])
                for name in ("deleted", "missing", "changed", "errors"):
                    getattr(out, name).extend(getattr(one, name))
            return out

        store.delete_checked = slow
    return gc.run(meta, store, gc.GCOptions(**a.get("opts", {})))


def compact(meta, store, settings, a: dict) -> dict:
    """A whole inline compaction of a collection (plan -> every unit)."""
    from seglake.lifecycle import compaction

    s = compaction.compact(meta, store, a["collection"], compaction.Policy.from_json(a["policy"]))
    return {"units": len(s.plan.units), **s.counts()}


def wal_archive(meta, store, settings, a: dict) -> dict:
    """One archive run of every archived pchannel into the target directory."""
    from seglake.lifecycle.backup import archive
    from seglake.storage.local import LocalStore

    r = archive.run(meta, store, LocalStore(a["target"]))
    return {"fragments": r["fragments"]}


STEPS = {f.__name__: f for f in (restore_all, redrive, snapshot_create, gc_run, backup_export, backup_import,
                                  backup_restore, compact, pitr_restore, wal_archive, pitr_restore_from_target,
                                  pitr_undrop)}


def main() -> int:
    step, args = sys.argv[1], json.loads(sys.argv[2])
    from seglake.config import Settings
    from seglake.errors import SeglakeError
    from seglake.meta import Meta
    from seglake.storage import open_store

    try:
        settings = Settings.load()
        with Meta.from_settings(settings) as meta:
            result = STEPS[step](meta, open_store(settings), settings, args)
    except SeglakeError as e:
        print(f"SeglakeError {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
