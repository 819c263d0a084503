"""Restore from a bundle (issue 26): the normal restore (lifecycle/restore.set_up) with a
bundle in a backup target as its source -- a copy job whose files come straight from the
target (copyjob/bundled.py), each byte read once and written once at its final key, the
bundle held in the target by the job, no import and no snapshot left behind -- and its
compare (the target's rows against the bundle's, read from the target).

    check (before anything is written): the bundle document (marker, SHA-256, every
          number), every timestamp against this store's clock, every data file present
          at its size
    -> restore.set_up: the Importing target, segments under fresh ids (partitions,
       segments, index builds mapped), ONE txn creating the job -- after the job's own
       hold is written and the document read again under it (same uid and digest)
    -> the copy-job steps (inline or Spark) do the rest; a bad file fails the job, which
       rolls its target back
"""

from __future__ import annotations

import logging
import uuid

from seglake.errors import Conflict, NotFound
from seglake.lifecycle import restore as restores
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import holds
from seglake.lifecycle.backup.imports import _check_clock, _entry_segments, document_digest
from seglake.meta import Meta
from seglake.meta.catalog import DEFAULT_DB
from seglake.meta.kv import Put, absent, unchanged
from seglake.progress import human_bytes
from seglake.storage import Store, layout

log = logging.getLogger("seglake.backup")


class BundleSource(restores.RestoreSource):
    """A restore's source that is a bundle in a backup target: the copy job reads each
    file from the target (copyjob/bundled.py), the job holds the bundle there instead
    of pinning a snapshot, and index build ids are mapped to fresh ones (ids of another
    etcd root)."""

    remap_builds = True

    def __init__(self, target: Store, doc: dict, db: str, collection: str, bundle: str):
        self.target, self.doc = target, doc
        self.identity = {"bundle": bundle, "bundle_uid": doc["uid"], "collection": collection, "db": db}
        self.job_fields = {"source_collection_id": 0, "source_collection": collection,
                           "snapshot": doc["source"]["snapshot"], "snapshot_id": 0,
                           "bundle": {"uri": target.uri, "db": db, "collection": collection, "bundle": bundle,
                                      "uid": doc["uid"], "digest": document_digest(doc), "hold": ""}}
        self.what = f"bundle {db}.{collection}/{bundle}"

    def read(self):
        return {"collection": self.doc["snapshot"]["collection"]}, _entry_segments(self.doc), {}

    def create_job(self, meta, job, claim):
        from seglake.meta.codec import encode_struct

        # the hold's name is unique in the target: job ids are local to one etcd root, and
        # every root that restores from this target shares it
        b = {**job.bundle, "hold": f"copyjob-{job.job_id}-{uuid.uuid4().hex[:12]}"}
        job = job.replace(bundle=b)
        # the job's hold, before the job exists: a prune from now on leaves the bundle; the
        # document is read again under it (a prune that ran before the hold took it)
        held = holds.hold(self.target, b["db"], b["collection"], b["bundle"], b["hold"],
                          by=f"restore copy job {job.job_id}", say=log.warning)
        try:
            again = bundles.read(self.target, b["db"], b["collection"], b["bundle"])
            if again["uid"] != b["uid"] or document_digest(again) != b["digest"]:
                raise Conflict(f"{self.what} was replaced by another bundle while the restore was set up; "
                               f"nothing copied")
            key = meta.keys.copy_job(job.job_id)
            meta.kv.txn([absent(key), unchanged(claim)], [Put(key, encode_struct(job))],
                        reason=f"restore job {job.job_id} could not be created")
        except BaseException:
            if held is not None:      # no job of ours holds it (a concurrent driver's job has its own hold)
                holds.release(self.target, held)
            raise
        return job.job_id


def _check_present(target: Store, doc: dict, where: str) -> None:
    """Every data file the bundle lists is in the target at its size (one listing of the
    data area; the content is checked as each file is copied): a bundle with a missing or
    truncated file is refused before anything is written."""
    have = bundles.blobs(target)
    bad = sorted({(f["sha256"], f["size"]) for f in doc["files"].values()
                  if have.get(f["sha256"]) != f["size"]})
    if bad:
        def why(sha: str, size: int) -> str:
            return "missing" if sha not in have else f"{have[sha]} bytes, the bundle lists {size}"
        listed = "; ".join(f"data/{sha[:16]}... ({why(sha, size)})" for sha, size in bad[:5])
        more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
        raise bundles.BundleError(f"{where}: {len(bad)} data files missing or of another size, nothing restored: "
                                  f"{listed}{more}")


def set_up(meta: Meta, store: Store, target: Store, doc: dict, source: "BundleSource", restore_to: str,
           where: str, **kw) -> int:
    """restore.set_up from a bundle read under the caller's hold, after the checks made
    before anything is written: a seglake bundle (not a Milvus capture), every timestamp
    against this store's clock, every data file present at its size. `kw`: restore.set_up's
    (checked by restore.check_request)."""
    bundles.seglake_only(doc, where)
    _check_clock(meta, doc, where)
    _check_present(target, doc, where)
    bundles.check_totals(doc, where)
    from seglake.lifecycle.copyjob.bundled import remember

    remember(target)   # this process's runners copy through this very target
    return restores.set_up(meta, store, source, restore_to, now=None, **kw)


def restore_from_bundle(meta: Meta, store: Store, target: Store, collection: str, bundle: str, restore_to: str, *,
                        db: str = DEFAULT_DB, timeout: float = 3600.0, owner: str = "", engine: str = "auto",
                        max_bytes_per_second: float = 0, max_requests_per_second: float = 0,
                        origin: dict | None = None, say=log.warning) -> dict:
    """Set up (or resume) the restore of bundle `bundle` of `db`.`collection` into the new
    collection `restore_to`: a copy job whose files come straight from the backup target,
    each byte read once and written once, at its final key (no import, no snapshot).
    Checked before anything is written: the bundle document (marker, SHA-256, every
    number), every timestamp against this store's clock, every data file present at its
    size; each file's SHA-256 and each log's rows (and a delete log's partitions) are
    checked as it is copied -- a bad one fails the job, which rolls its target back.
    Returns {job_id, target_collection, bundle, uid}; the copy-job steps do the rest."""
    bundles.check_names(db, collection, bundle)
    timeout, bps, rps = restores.check_request(restore_to, db, timeout, owner, engine, max_bytes_per_second,
                                               max_requests_per_second, origin)
    where = f"bundle {db}.{collection}/{bundle}"
    with holds.held(target, db, collection, bundle, by=f"restore into {db}.{restore_to}", say=say):
        doc = bundles.read(target, db, collection, bundle)
        job_id = set_up(meta, store, target, doc, BundleSource(target, doc, db, collection, bundle), restore_to,
                        where, db=db, timeout=timeout, owner=owner, engine=engine, max_bytes_per_second=bps,
                        max_requests_per_second=rps, origin=origin)
    say(f"restore of {where} into {db}.{restore_to}: copy job {job_id} ({doc['totals']['segments']} segments, "
        f"{len(doc['files'])} files, {human_bytes(sum(f['size'] for f in doc['files'].values()))}) from "
        f"{target.uri}")
    return {"job_id": job_id, "target_collection": restore_to, "bundle": bundle, "uid": doc["uid"],
            "snapshot": doc["source"]["snapshot"]}


class _BundleView:
    """A bundle's segment files read by their own keys (visibility reads them so):
    each key served from its data file in the target."""

    def __init__(self, target: Store, doc: dict):
        self.target, self.files = target, doc["files"]

    def open_read(self, key: str):
        f = self.files.get(key)
        if f is None:
            raise NotFound(f"{key} is not a file of the bundle")
        return self.target.open_read(layout.bundle_blob(f["sha256"]))


def compare_with_bundle(meta: Meta, store: Store, target: Store, collection: str, bundle: str, restored: str, *,
                        db: str = DEFAULT_DB) -> dict[str, tuple[int, int]]:
    """restore.compare_with_snapshot for a restore from a bundle: the restored
    collection's visible rows against the bundle's, read from the backup target, each
    side through its own partitions (the bundle's ids name its partitions by name)."""
    bundles.check_names(db, collection, bundle)
    with holds.held(target, db, collection, bundle, by=f"compare with {db}.{restored}"):
        doc = bundles.seglake_only(bundles.read(target, db, collection, bundle), f"bundle {db}.{collection}/{bundle}")
        segs = [s for s in _entry_segments(doc) if s.state != "Dropped"]
        parts = {p["partition_id"]: p["name"] for p in doc["snapshot"]["collection"]["partitions"]}
        return restores.compare_target(meta, store, restored, db, _BundleView(target, doc), segs, parts)


def check_restored_from_bundle(meta: Meta, store: Store, target: Store, collection: str, bundle: str, restored: str,
                               *, db: str = DEFAULT_DB, say=print) -> dict[str, tuple[int, int]]:
    """compare_with_bundle, printed; RestoreDiffers if any line differs (the bundle
    restore DAG's last step). A bundle pruned since the copy job ended (its hold ends with
    the job) cannot be compared: said, and {} returned -- the restore stands on the checks
    its copy made of every file and on the target's verify."""
    try:
        rows = compare_with_bundle(meta, store, target, collection, bundle, restored, db=db)
    except NotFound as e:
        say(f"compare skipped: {e} (pruned after the restore's copy job ended); every file was checked as it was "
            f"copied and the target's verify ran")
        return {}
    return restores.judge(rows, f"bundle {db}.{collection}/{bundle}", restored, say)
