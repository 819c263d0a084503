"""Which engine marks: inline (the references read in the task) or Spark (read by the
executors), from the size of the store's references."""

from __future__ import annotations

from seglake import runners
from seglake.lifecycle.gc.refs import load_references
from seglake.meta import Meta
from seglake.storage import Store


def choose(meta: Meta, store: Store, engine: str, settings) -> tuple[str, str]:
    """(engine, why) for a mark. engine=spark: the references are read by the executors,
    never all in this process; otherwise a store with more segment records than the
    inline limit is Spark's (each record names at least one file) without reading them,
    else the references are read here, completely (fail closed, before any listing), and
    their file count decides."""
    records = meta.kv.count(meta.keys.segments_prefix())
    if runners.choose("gc", engine, records, settings) == "spark":
        return "spark", f"gc: {records} segment records; engine spark (references read by the executors)"
    refs = load_references(meta, store)
    chosen = runners.choose("gc", engine, len(refs.files), settings)
    return chosen, (f"gc: {len(refs.files)} referenced files, {len(refs.blocked)} collections with a PENDING "
                    f"snapshot, paused: {'all' if refs.paused_all else sorted(refs.paused)}; engine {chosen}")
