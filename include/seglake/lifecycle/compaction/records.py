"""Unit records past their retention (GC's records step calls this): a committed or lost
record is removed; a record still `prepared` that long (its run was killed and never
re-run) is first recorded lost and the files any run of it wrote are removed -- nothing
can commit them once it is lost (the commit compares the record unchanged). Every
change is guarded by the record's revision: a run that moves it first wins. A record that is
not what a run writes (edited, corrupt) is counted and left alone, never half-acted on."""

from __future__ import annotations

from seglake import limits
from seglake.errors import Conflict, ValidationError
from seglake.meta.codec import decode, encode
from seglake.meta.kv import Delete, Put, unchanged
from seglake.storage import layout
from seglake.lifecycle.compaction.running import COMMITTED, LOST, PREPARED, CompactionError, UnitResult
from seglake.lifecycle.compaction.folding import remove_outputs
from seglake.lifecycle.compaction.policy import FOLD, Unit


def expire_unit_records(meta, store, retention: float, now: float, collection_id: int | None = None) -> dict:
    """{"unit_records_removed": n, "abandoned_units_lost": m, "corrupt_unit_records_kept": k} (module doc)."""
    out = {"unit_records_removed": 0, "abandoned_units_lost": 0, "corrupt_unit_records_kept": 0}
    for kv in list(meta.kv.range(meta.keys.compaction_units_prefix(collection_id))):
        rec = decode(kv.value, kv.key)
        try:
            check_record(rec, kv.key)
        except CompactionError:     # edited or corrupt: nothing done for it (fail closed), the rest goes on
            out["corrupt_unit_records_kept"] += 1
            continue
        state = rec.get("state")
        since = rec.get("committed_at") if state == COMMITTED else rec.get("lost_at", rec.get("prepared_at"))
        if not isinstance(since, (int, float)) or since + retention >= now:
            continue
        try:
            if state == PREPARED:
                meta.kv.txn([unchanged(kv)], [Put(kv.key, encode({**rec, "state": LOST, "lost_at": now,
                                                                  "reason": "abandoned: prepared past retention"},
                                                                 version=4 if rec["unit"].get("kind") == FOLD else 1))])
                u = rec["unit"]
                if u.get("kind") == FOLD:
                    remove_outputs(meta, store, u["collection_id"], rec)
                    out["abandoned_units_lost"] += 1
                    continue
                out_key = meta.keys.segment(u["collection_id"], u["partition_id"], int(rec["output"]))
                keys = [] if meta.kv.get(out_key) is not None else [   # a segment's files are never a unit's
                    o.key for d in layout.segment_dirs(u["collection_id"], u["partition_id"], int(rec["output"]))
                    for o in store.list(d)]
                if keys:
                    store.delete_many(keys)
                out["abandoned_units_lost"] += 1
            elif state in (COMMITTED, LOST):
                meta.kv.txn([unchanged(kv)], [Delete(kv.key)])
                out["unit_records_removed"] += 1
        except Conflict:
            continue        # a run moved it since the listing: it wins, judged next time
    return out


def check_record(rec: dict, key: str) -> None:
    """A unit record's fields as a run writes them (a merge's or a fold's), or CompactionError
    naming it (edited or corrupt): never a KeyError/TypeError from inside the run, nor an id as text."""
    fold, res = isinstance(rec.get("unit"), dict) and rec["unit"].get("kind") == FOLD, rec.get("result")
    ids = {n: (rec.get(n) if fold else [rec.get(n)]) for n in (("outputs", "log0s") if fold else ("output", "log0"))}
    ids.update(nlogs=[rec.get("nlogs")], sources_revision=[rec.get("sources_revision")])
    bad = [n for n, v in {**ids, "legacy_sources": rec.get("legacy_sources")}.items() if not isinstance(v, list)
           or not all(type(x) is int and (0 if n == "legacy_sources" else 1) <= x <= limits.ID_MAX for x in v)]
    try:
        Unit.from_json(rec.get("unit") if isinstance(rec.get("unit"), dict) else {})
    except ValidationError:
        bad.insert(0, "unit")
    if rec.get("state") not in (PREPARED, COMMITTED, LOST):
        bad.insert(0, "state")
    elif rec["state"] == COMMITTED and not (isinstance(res, dict) and set(res) <= set(UnitResult.__annotations__)
                                            and {"unit_id", "status"} <= set(res)):
        bad.insert(0, "result")
    if bad:
        raise CompactionError(f"unit record {key} is corrupt (edited?): {', '.join(f'{n}={rec.get(n)!r}' for n in bad)}"
                              f" is not what a run writes; nothing written")
