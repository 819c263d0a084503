"""Write-ahead log: messages, per-pchannel logs of fragments in the store, term-fenced
writers (lifetime), the scanner adaptor (reorder, txn, vchannel filter, pause) and the
ingest client. See README "How the WAL works"."""


def console_channels(meta) -> list[dict]:
    """One row per vchannel for the seglake page and /metrics: its pchannel's term,
    writer, last time tick (unix seconds), the vchannel's checkpoint tick and its lag
    behind the log (seconds; None before the flusher's first checkpoint), paused, and
    the transactions the last flusher run saw open on it."""
    from seglake.meta.alloc import physical_ms
    from seglake.wal.client import read_checkpoint, wal_status

    rows = []
    for p in wal_status(meta):
        last_s = physical_ms(p["last_time_tick"]) / 1000 if p["last_time_tick"] else None
        for c in p["consumers"]:
            cp = read_checkpoint(meta, c["vchannel"])
            rows.append({"vchannel": c["vchannel"], "pchannel": p["pchannel"], "term": p["term"],
                         "writer": p["writer"], "last_tick_ts": last_s,
                         "checkpoint_ts": None if cp is None else physical_ms(cp.get("time_tick", 0)) / 1000,
                         "lag_s": None if c["lag_ms"] is None else c["lag_ms"] / 1000, "paused": p["paused"],
                         # as the last flusher run saw them (txn ids open on this vchannel)
                         "open_txns": [t["txn_id"] for t in p.get("open_txns", ()) if t["vchannel"] == c["vchannel"]]})
    return rows
