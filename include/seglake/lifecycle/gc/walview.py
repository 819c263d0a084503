"""The WAL as GC sees it: which fragments of each pchannel every consumer has passed
(seglake.wal.checkpoints) and no point-in-time window holds, read once per mark, and re-read right before a sweep deletes
(recording the truncation in etcd first)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from seglake import faults
from seglake.errors import ValidationError
from seglake.lifecycle.gc.verdicts import WAL_RETAINED, WAL_SKIPPED, WAL_TRUNCATED
from seglake.meta import Meta
from seglake.storage import Store, layout
from seglake.wal.checkpoints import record_truncation


@dataclass
class WalView:
    """The WAL fragments this run may delete, per pchannel seen under wal/, read once:
    those below every checkpoint (`truncatable`) and files no committed fragment of the
    log names (not in `referenced`: a producer's write that never committed, a format-1
    hole, a truncated fragment). `error` set: nothing under wal/ is judged (fail closed
    for the WAL only)."""
    truncatable: dict[str, set[str]] = field(default_factory=dict)
    referenced: dict[str, set[str]] = field(default_factory=dict)
    error: str | None = None

    def verdict(self, key: str) -> str | None:
        """WAL_TRUNCATED (before its age is looked at), why a fragment is kept, or None
        for a key that is not a WAL fragment."""
        p = layout.parse_wal_fragment(key)
        if p is None or not _is_pchannel(p[0]):
            return None  # not a fragment of one of seglake's pchannels: unrecognised
        if self.error is not None or p[0] not in self.referenced:
            return WAL_SKIPPED
        if key in self.truncatable.get(p[0], ()) or key not in self.referenced[p[0]]:
            return WAL_TRUNCATED
        return WAL_RETAINED

    def summary(self) -> dict:
        return {"pchannels": len(self.truncatable), "truncatable": sum(map(len, self.truncatable.values())),
                "error": self.error}


def _is_pchannel(name: str) -> bool:
    from seglake.wal.log import validate_pchannel
    try:
        validate_pchannel(name)
    except ValidationError:
        return False
    return True


def wal_truncatable(meta: Meta, pchannel: str, holds: list | None = None, wanted: dict | None = None) -> set[str]:
    """Below every checkpoint, below what every point-in-time window holds
    (seglake.lifecycle.pitr.window.holds, read by each mark and each sweep -- `holds` when
    the caller read them for several pchannels -- so a window turned off or shortened
    releases its fragments at the next GC), and for an archived pchannel below the
    archive's cursor (lifecycle/backup/archive.py: what is not shipped yet stays;
    `wanted`: the pchannels its policies want, read once like `holds`)."""
    from seglake.lifecycle.backup.archive import truncation_floor
    from seglake.lifecycle.pitr.window import held_fragment, holds as window_holds
    from seglake.wal.checkpoints import truncatable_fragments
    from seglake.wal.message import MessageId

    n = held_fragment(window_holds(meta) if holds is None else holds, pchannel)
    floor = truncation_floor(meta, pchannel, wanted)
    return set(truncatable_fragments(meta, pchannel, [] if n is None else [MessageId(0, n, 0)],
                                     floors=() if floor is None else (floor,)))


def wal_referenced(meta: Meta, pchannel: str) -> set[str]:
    from seglake.wal.checkpoints import referenced_fragments
    return referenced_fragments(meta, pchannel)


def load_wal_view(meta: Meta, store: Store, collection_id: int | None) -> WalView:
    """Truncatable fragments of every pchannel with a directory under wal/. A scoped run
    (one collection) never judges the WAL. Never raises: an error is kept in the view."""
    view = WalView()
    if collection_id is not None:
        return view
    try:
        faults.point("gc.mark.wal")
        from seglake.lifecycle.pitr.window import holds
        dirs, _ = store.list_level(f"{layout.WAL}/")
        from seglake.lifecycle.backup.archive import wanted_pchannels
        held = holds(meta)   # the point-in-time windows, once for every pchannel
        wanted = wanted_pchannels(meta)   # the archive's policies, likewise (cursors: per pchannel)
        for d in dirs:
            name = d[len(layout.WAL) + 1:].rstrip("/")
            if _is_pchannel(name):  # (any other directory's keys stay unrecognised)
                view.truncatable[name] = wal_truncatable(meta, name, held, wanted)
                view.referenced[name] = wal_referenced(meta, name)
    except Exception as e:
        view.truncatable, view.referenced, view.error = {}, {}, f"{type(e).__name__}: {e}"
    return view


def archive_guard(meta: Meta, pchannel: str):
    """A Compare: the WAL archive's cursor of `pchannel` is as read now (absent: still
    absent). An archive begun or moved between this read and the truncation's txn makes
    the truncation refuse (lifecycle/backup/archive.py)."""
    from seglake.meta import keys as keymod
    from seglake.meta.kv import Compare

    key = keymod.archive_cursor(meta.keys, pchannel)
    kv = meta.kv.get(key)
    return Compare(key, "mod", "==", kv.mod_revision if kv is not None else 0)


def not_truncatable(meta: Meta, keys: list[str], out) -> list[str]:
    """Re-read, right before deleting, which of these WAL fragments are still below
    every checkpoint, and record the truncation of those in etcd (before any delete).
    Returns the keys that must be kept; a pchannel that fails is kept whole (error)."""
    by_pchannel: dict[str, list[str]] = defaultdict(list)
    for k in keys:
        by_pchannel[layout.parse_wal_fragment(k)[0]].append(k)
    keep = []
    held = wanted = None
    for pch, ks in sorted(by_pchannel.items()):
        try:
            if held is None:
                from seglake.lifecycle.backup.archive import wanted_pchannels
                from seglake.lifecycle.pitr.window import holds
                held = holds(meta)   # re-read right before this sweep's deletes
                wanted = wanted_pchannels(meta)   # (a policy turned on later makes a cursor first: guarded below)
            cursor = archive_guard(meta, pch)   # read before the floor it gives: a change after refuses
            ok = wal_truncatable(meta, pch, held, wanted)
            ref = wal_referenced(meta, pch)
            faults.point("gc.sweep.wal_truncate")
            below = [k for k in ks if k in ok]
            if below:
                record_truncation(meta, pch, below, guards=[cursor])
            keep += [k for k in ks if k not in ok and k in ref]
        except Exception as e:
            out.error(layout.wal_prefix(pch), f"wal truncation not recorded, kept: {type(e).__name__}: {e}")
            keep += ks
    return keep
