"""What a run would not find, refused before the run exists (issue 27: unknown names are a
404 before any run is created, through every door -- the REST API's typed endpoints and
its generic `POST /runs/{dag_id}`).

`missing(meta, dag_id, conf, ...)` raises NotFound naming the first object the run's
first step would look up and not find: the collection, the snapshot, the copy job, the
bundle in the backup target, the Milvus source. It asks the same lookups the lifecycles
ask (a dropped collection's snapshot is still found; a Dropped collection is still a
drop's to report; a clear of a policy or window finds it as that clear does). Anything
else -- a state conflict, a damaged bundle, a target that does not answer -- is left to
the run, which says it. Read-only; `conf` is the checked conf (contract.check_conf).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from seglake.errors import NotFound

# the DAGs whose conf names a live collection its first step reads (None: not named, nothing to check)
_COLLECTION = ("snapshot_create", "verify_collection", "compaction", "snapshot_schedule", "gc")
# the DAGs that always read or write the backup target; and those that do with from_target
_TARGET = ("snapshot_export", "snapshot_verify", "snapshot_restore_external", "wal_archive", "milvus_backup",
           "milvus_restore")
_FROM_TARGET = ("collection_undrop", "restore_database")
_POLICY = ("snapshot_retention", "compaction_policy", "pitr_window")   # set: the collection; clear: as each clears


def missing(meta, dag_id: str, conf: Mapping[str, Any], *, store=None,
            backup: Callable[[Any], Any] | None = None, settings=None,
            connection: Callable[[str], bool] | None = None) -> None:
    """NotFound for what a run of `dag_id` with `conf` would not find; None otherwise.
    `backup(uri)`: the backup target store (asked only when a bundle or an undrop from the
    target is named). An undrop is checked as its run's first step checks it
    (pitr.check_undrop: also 409 when the collection is not dropped or the target taken).
    `connection(id)`: whether the orchestrator has that connection (asked for the Milvus a
    milvus_restore writes into, whose connection its first step reads)."""
    from seglake.lifecycle import snapshot

    if settings is not None and conf.get("backup_uri"):
        _target_uri(settings, conf["backup_uri"])
    if dag_id == "snapshot_retention" and not conf.get("clear") and settings is not None \
            and not settings.backup_uri:
        for flag in ("export", "archive"):   # every scheduled run would fail on it, after a green set
            if conf.get(flag):
                from seglake.errors import ValidationError

                raise ValidationError(f"conf key {flag!r}: true needs a backup target and config key 'backup_uri' "
                                      "is not set; set it first (the schedule's exports and the WAL archive use it)")
    no_target = (settings is not None and not conf.get("backup_uri") and not settings.backup_uri
                 and (dag_id in _TARGET or (dag_id in _FROM_TARGET and conf.get("from_target"))))
    if no_target and dag_id in _FROM_TARGET:   # these look their names up in the target: said first
        _no_target()
    db = conf.get("db") or "default"
    coll = conf.get("collection")
    if dag_id in _COLLECTION and coll:
        live = meta.catalog.get_by_name(coll, db)
        if dag_id == "snapshot_create" and meta.snapshots.find(live.collection_id, conf["name"]) is not None:
            from seglake.errors import Conflict   # a new run is a new owner: its create would refuse the name

            raise Conflict(f"snapshot {conf['name']!r} already exists for collection {coll!r}")
        if dag_id == "snapshot_create" and live.state != "Created":
            from seglake.errors import StateError   # as snapshot.begin refuses it

            raise StateError(f"collection {coll!r} is {live.state}; snapshots need a live collection")
        if dag_id == "verify_collection" and live.state == "Importing":
            from seglake.errors import StateError   # its files are still being copied: "missing" is not damage

            raise StateError(f"collection {coll!r} is Importing (a restore into it is under way, its files are "
                             "still being copied); verify it once the restore has finished")
    elif dag_id in _POLICY and coll and not conf.get("clear"):
        meta.catalog.get_by_name(coll, db)
    elif dag_id in _POLICY and coll:   # a clear: the name as each clear looks it up (a dropped one too, where it may)
        _clear_target(meta, dag_id, coll, db)
    elif dag_id == "drop_collection":
        from seglake.lifecycle import drop

        found = drop.find(meta, coll, db)
        if found is None:
            raise NotFound(f"collection {coll!r} not found in db {db!r}")
        job = drop.running_restore(meta, found.collection_id)   # as begin_drop refuses it: 409
        if job is not None or found.state == "Importing":
            from seglake.errors import StateError

            raise StateError(f"collection {coll!r} is the target of a restore under way"
                             + (f" (copy job {job.job_id}, {job.state})" if job is not None else " (Importing)")
                             + "; wait for it or roll it back before dropping")
    elif dag_id in ("snapshot_export", "snapshot_restore") and conf.get("snapshot") is not None:
        rec, _ = snapshot.resolve(meta, coll, conf["snapshot"], db=db)
        if dag_id == "snapshot_export" and backup is not None:   # the bundle name held by another snapshot: 409
            _bundle_name_free(backup, conf.get("backup_uri"), db, coll, conf.get("bundle") or conf["snapshot"], rec)
        if dag_id == "snapshot_restore" and conf.get("target"):   # taken by another: 409, as the typed door
            from seglake.lifecycle import restore

            restore.check_target(meta, conf["target"], db, {"collection": coll, "collection_id": rec.collection_id,
                                                            "snapshot": conf["snapshot"],
                                                            "snapshot_id": rec.snapshot_id})
    elif dag_id == "snapshot_restore":   # to a time: the source collection, and its window, log and instant
        meta.catalog.get_by_name(coll, db)
        if store is not None and conf.get("as_of") is not None and _absent(meta, conf.get("target"), db):
            from seglake.lifecycle import pitr

            pitr.plan(meta, store, coll, str(conf["as_of"]), db=db)   # as POST /collections/{c}/restore checks it
    elif dag_id == "restore_database":
        names = [c.strip() for c in (conf.get("collections") or "").split(",") if c.strip()]
        if not conf.get("from_target"):
            for name in names:
                meta.catalog.get_by_name(name, db)
        if store is not None and (not conf.get("from_target") or backup is not None):
            from seglake.lifecycle.pitr.database import plan_database   # as the run's first step plans the set

            plan_database(meta, store, db, str(conf["as_of"]), suffix=conf["suffix"], collections=names or None,
                          target=backup(conf.get("backup_uri")) if conf.get("from_target") else None)
    elif dag_id == "snapshot_drop":   # as DELETE /snapshots/{c}/{name} answers: a held snapshot is a 409
        import time

        from seglake.errors import Conflict

        rec, _ = snapshot.resolve(meta, coll, conf["name"], db=db)
        held = meta.snapshots.pinned_by(rec, time.time())
        if held:
            raise Conflict(f"snapshot {conf['name']!r} is held by {', '.join(held)}; unpin it or wait for the copy")
    elif dag_id == "copy_segment_job":
        _job_target_alive(meta, int(conf["job_id"]))
    elif dag_id == "collection_undrop" and store is not None:
        from seglake.lifecycle import pitr

        target = backup(conf.get("backup_uri")) if conf.get("from_target") and backup is not None else None
        pitr.check_undrop(meta, store, coll, conf["target"], db=db, backup=target, bundle=conf.get("bundle"))
    if dag_id == "snapshot_schedule" and conf.get("milvus_source"):
        from seglake.milvus import sources

        sources.get_source(meta, conf["milvus_source"])
    if no_target:   # a fresh install: the run's first step would say it (an unknown name was said above)
        _no_target()
    if dag_id in ("snapshot_verify", "snapshot_restore_external", "milvus_restore") and conf.get("bundle") \
            and backup is not None:
        _bundle(backup, conf.get("backup_uri"), db, coll, conf["bundle"])
    if dag_id == "milvus_restore" and connection is not None:
        cid = conf.get("milvus_conn_id") or "milvus_default"
        if not connection(cid):
            raise NotFound(f"Airflow connection {cid!r} (conf key 'milvus_conn_id': the Milvus to restore into) does "
                           f"not exist; add it (host, port; extra: bucket, s3_endpoint, s3_access_key, s3_secret_key) "
                           f"or name another")
    if dag_id == "snapshot_restore_external" and conf.get("target"):   # taken by another collection: 409
        from seglake.lifecycle import restore

        same = {"collection": coll, "db": db}   # what every restore from a bundle records (a part: the run decides)
        restore.check_target(meta, conf["target"], db, same if conf.get("as_of") else {**same,
                                                                                      "bundle": conf.get("bundle")})


def _no_target() -> None:
    from seglake.errors import ValidationError

    raise ValidationError("no backup target: conf key 'backup_uri' is empty and config key 'backup_uri' is not set; "
                          "pass conf key 'backup_uri' (an absolute local path or s3://bucket/prefix) or set config "
                          "key 'backup_uri'")


def _clear_target(meta, dag_id: str, collection: str, db: str) -> None:
    """NotFound when the clear's run would not find the collection: a retention policy by
    the live collection or the one policy recorded under the name (a dropped one); a
    point-in-time window by the live or newest dropped collection; a compaction policy by
    the live collection."""
    if dag_id == "snapshot_retention":
        from seglake.lifecycle import retention

        retention._policy_key(meta, collection, db)
    elif dag_id == "pitr_window":
        from seglake.lifecycle import drop

        if drop.find(meta, collection, db) is None:
            raise NotFound(f"collection {collection!r} not found in db {db!r}")
    else:
        meta.catalog.get_by_name(collection, db)


def _job_target_alive(meta, job_id: int) -> None:
    """NotFound for an unknown job; Conflict when its target collection is gone or dropped
    (its finalize would fail: nothing left to copy into)."""
    from seglake.errors import Conflict
    from seglake.meta.catalog import DROPPED, DROPPING

    job, _ = meta.copyjobs.get(job_id)
    try:
        target = meta.catalog.get(job.target_collection_id)
    except NotFound:
        target = None
    if target is None or target.state in (DROPPED, DROPPING):
        raise Conflict(f"copy job {job_id} ({job.state}) copies into collection {job.target_collection!r}, which is "
                       f"{target.state if target is not None else 'gone'}: nothing to resume; restore again into "
                       "a new target")


def _target_uri(settings, uri: str) -> None:
    """A backup_uri given in the conf that every run would refuse (in the store, or holding
    it): ValidationError naming the conf key, before any run."""
    from seglake.errors import ConfigError, ValidationError
    from seglake.lifecycle.backup.bundle import target_uri

    try:
        target_uri(settings, uri, key="conf key 'backup_uri' (Backup target)")
    except ConfigError as e:
        raise ValidationError(str(e)) from None


def _bundle_name_free(backup, uri, db: str, collection: str, bundle: str, rec) -> None:
    """Conflict when the target holds bundle `bundle` of another snapshot (export.export
    refuses it); a target that cannot be read is the run's to say."""
    from seglake.errors import Conflict
    from seglake.lifecycle.backup import bundle as bundles

    try:
        done = bundles.existing(backup(uri), db, collection, bundle)
    except Exception:  # noqa: BLE001 - unreadable or damaged: the run reports it
        return
    if done is not None and not bundles.same_snapshot(done, rec.snapshot_id, rec.collection_id):
        try:
            bundles.refuse_other(done, db, collection, bundle)
        except Conflict:
            raise
        except Exception:  # noqa: BLE001 - a document without its source: the run reports it
            return


def _absent(meta, name, db: str) -> bool:
    """No collection `name` yet (a taken target is a re-run that resumes: its run decides)."""
    if not name:
        return False
    try:
        meta.catalog.get_by_name(name, db)
    except NotFound:
        return True
    return False


def _bundle(backup, uri, db: str, collection: str, bundle: str) -> None:
    """NotFound when the backup target has no committed bundle of that name; a target that
    cannot be read (or a damaged bundle: a finding of the run's own) is the run's to say."""
    from seglake.lifecycle.backup import bundle as bundles

    try:
        bundles.read(backup(uri), db, collection, bundle, segments=False)
    except NotFound:
        raise
    except Exception:  # noqa: BLE001 - not a missing name: the run reports it
        return
