"""A copy job's files taken straight from a bundle in a backup target (a restore from a
bundle): each file read once from `data/{sha256}` in the target and written once at its
final key in this store, its SHA-256 and size checked while it streams (nothing appears
under the key otherwise); an insert or delete log is read into a local spool first
(bundle.spool_hashed, then copy_verified_from, as the export does) and
its row count, its column (and a delete log's partition ids) checked against the segment
records -- as a bundle verify does -- before it is written: nothing is read back.

One BundleFiles per runner: it holds the bundle in the target while it copies (the
job's own hold, written by the restore's set-up and renewed here; a retention prune
leaves a held bundle), reads the bundle document once (its commit marker and SHA-256
checked, and that it is the document the job was made from: same uid and digest), and maps each
source key of the job's mappings -- the bundle's own segment keys -- to its data file.
A bundle that is gone or replaced fails the job's tasks (the job then fails and rolls
its target back), never copies something else.
"""

from __future__ import annotations

import logging

from seglake import faults
from seglake.errors import NotFound, Unavailable
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import holds, verify
from seglake.storage import Store, layout

log = logging.getLogger("seglake.copy")

# A target this process already opened (the restore's driver, the CLI): runners of the
# same process reuse it; any other runner opens it from its settings (open_target).
_OPENED: dict[str, Store] = {}


def remember(target: Store) -> None:
    _OPENED[target.uri] = target


def target_of(uri: str, settings=None) -> Store:
    """The backup target at `uri`: the one this process opened, else from `settings`."""
    if uri in _OPENED:
        return _OPENED[uri]
    if settings is None:
        from seglake.config import Settings
        settings = Settings.load()
    return bundles.open_target(settings, uri)


class BundleFiles:
    """Opened by a runner (copying.open_source). What it cannot open for good -- the
    bundle gone, damaged or replaced -- fails the tasks (describe); a transient error of
    the target (Unavailable, a prune that keeps running) raises here, so the tasks stay
    as they are and a re-run resumes them."""

    def __init__(self, job, settings=None, meta=None):
        from seglake.lifecycle.copyjob.copying import SourceMissing

        self.missing, self.meta = SourceMissing, meta
        self.job, self.beat, self.error = job, None, None
        b = job.bundle
        self.where = f"bundle {b['db']}.{b['collection']}/{b['bundle']} in {b['uri']}"
        self.files: dict[str, dict] = {}
        self.rows: dict[str, int] = {}
        self.parts: dict[str, list[int]] = {}
        self.columns: dict[str, str] = {}
        self.stamps: dict[str, list[int]] = {}
        self.target = target_of(b["uri"], settings)
        self.key = holds.hold(self.target, b["db"], b["collection"], b["bundle"], b["hold"],
                              by=f"restore copy job {job.job_id}", say=log.warning)
        if self.key is not None:
            self.beat = holds.KeepAlive(self.target, self.key, holds.HOLD_TTL, {"by": f"restore copy job {job.job_id}"},
                                        still=None if meta is None else self._job_running)
        try:
            doc = bundles.read(self.target, b["db"], b["collection"], b["bundle"])
        except (NotFound, bundles.BundleError) as e:   # gone or damaged: for good
            self.error = f"{self.where}: {e}"
            return
        except BaseException:
            self.close()
            raise
        from seglake.lifecycle.backup.imports import document_digest

        if doc["uid"] != b["uid"] or b.get("digest") not in (None, document_digest(doc)):
            self.error = (f"{self.where} is another bundle document now (uid {doc['uid']}, the job was made from "
                          f"{b['uid']}, digest {str(b.get('digest'))[:16]}...): nothing of it is copied")
            return
        self.files = doc["files"]
        for u in verify.units_of(doc):
            self.rows.update(u["rows"])
            self.parts.update(u["partitions"])
            self.columns.update(u["columns"])
            self.stamps.update(u["stamps"])

    def describe(self, keys) -> dict:
        """The copy task's start: a bundle that could not be opened fails the task here."""
        if self.error:
            raise self.missing(self.error)
        self._check_held()
        return {}

    def _check_held(self) -> None:
        """Copying on while the hold cannot be renewed would copy an unheld bundle that a
        prune may drop: stop (the tasks stay resumable) once it is half expired."""
        if self.beat is not None and not self.beat.held(holds.HOLD_TTL / 2):
            raise Unavailable(f"{self.where}: the job's hold on it went unrenewed for more than "
                              f"{holds.HOLD_TTL / 2:.0f} s (the job paused, or the target unwritable); stopped "
                              f"copying (a re-run resumes)")

    def copy(self, store: Store, src: str, dst: str, size: int, check: bool = True, listed=None, present=None,
             throttle=None) -> tuple[bool, int]:
        """(copied, size) of one file (copying._copy_one's contract)."""
        f = self.files.get(src)
        if f is None or f["size"] != size:
            raise self.missing(f"{self.where}: {src} is " + ("not in it" if f is None else
                                                             f"{f['size']} bytes there, the job recorded {size}"))
        sha = f["sha256"]
        self._check_held()
        if check and self._holds(store, dst, sha, size, present):
            return False, size
        if throttle is not None:
            throttle.acquire(size)
        blob = layout.bundle_blob(sha)
        try:
            if src in self.rows:     # a log: read once, hashed and checked BEFORE it is written
                spool, got, n = bundles.spool_hashed(self.target, blob)
                with spool:
                    if n != size or got != sha:
                        raise bundles.BundleError(f"{blob}: read {n} bytes with SHA-256 {got[:16]}..., expected "
                                                  f"{size} bytes with {sha[:16]}...: the file changed or is damaged")
                    spool.seek(0)
                    problems = verify.log_problems_of(spool, self.rows[src], self.parts.get(src),
                                                      self.columns.get(src), self.stamps.get(src))
                    if problems:
                        raise self.missing(f"{self.where}: {src} ({blob}): {'; '.join(problems)}")
                    bundles.copy_verified_from(spool, blob, store, dst, sha, size)
            else:                    # a stats log or an index file: its content is its SHA-256's
                bundles.copy_verified(self.target, blob, store, dst, sha, size)
        except NotFound:
            raise self.missing(f"{self.where}: data file {blob} (for {src}) is missing from the backup target") from None
        except bundles.BundleError as e:
            raise self.missing(f"{self.where}: {src}: {e}") from None
        faults.point("copy.after_file")
        return True, size

    def _holds(self, store: Store, dst: str, sha: str, size: int, present) -> bool:
        """A retry: `dst` is already there, whole, with this content (a log was checked
        before it was written: these bytes passed)."""
        from seglake.lifecycle.copyjob.copying import _UNLISTED

        if present is None:          # its directory's listing showed no such object
            return False
        return bundles.has_content(store, dst, sha, size, None if present is _UNLISTED else present)

    def _job_running(self) -> bool:
        from seglake.meta.copyjobs import JOB_TERMINAL

        return self.meta.copyjobs.get(self.job.job_id)[0].state not in JOB_TERMINAL

    def close(self) -> None:
        """Stop renewing the hold; end it when the job has finished meanwhile (its
        finalize removed it, and this runner's renewal may have put it back)."""
        if self.beat is not None:
            self.beat.stop()
            self.beat = None
        if self.key is not None and self.meta is not None:
            try:
                if not self._job_running():
                    holds.release(self.target, self.key)
            except Exception:  # noqa: BLE001 - a hold left behind expires after HOLD_TTL
                pass
