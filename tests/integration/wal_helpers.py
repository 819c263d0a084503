"""Shared helpers of the WAL integration tests."""

from __future__ import annotations

from seglake.meta.catalog import DEFAULT_PARTITION


def schema(dim: int = 8) -> list[dict]:
    return [
        {"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
        {"field_id": 101, "name": "embedding", "dtype": "FloatVector", "dim": dim},
        {"field_id": 102, "name": "price", "dtype": "Float"},
    ]


def make_collection(client, name: str = "c1", shards: int = 2, dim: int = 8):
    return client.create_collection(name, schema(dim), shards=shards)


def pchannels(coll) -> list[str]:
    from seglake.meta.catalog import pchannel_of
    return sorted({pchannel_of(v) for v in coll.vchannels})


def all_messages(meta, store, pchannel, settings):
    from seglake.wal.scanner import recovery_scanner
    return recovery_scanner(meta, store, pchannel, settings, follow=False).drain()


def inserted_pks(msgs) -> list[int]:
    from seglake.wal import message as M
    out = []
    for m in msgs:
        if m.type == M.INSERT:
            out.extend(m.body.column("pk").to_pylist())
    return out


__all__ = ["DEFAULT_PARTITION", "schema", "make_collection", "pchannels", "all_messages", "inserted_pks"]
