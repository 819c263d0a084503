"""Authoritative metadata in etcd. `Meta` bundles the client, the key builders and the
domain stores so a lifecycle step takes one object."""

from __future__ import annotations

from functools import cached_property

from seglake.meta.alloc import MAX_CLOCK_SKEW, TSO, IdAllocator
from seglake.meta.keys import Keys
from seglake.meta.kv import KV


class Meta:
    def __init__(self, kv: KV, root: str = "seglake", id_block_size: int = 10000,
                 max_clock_skew: float = MAX_CLOCK_SKEW):
        self.kv = kv
        self.keys = Keys(root)
        kv.marker_keys = self.keys  # write markers live under this root
        self.ids = IdAllocator(kv, self.keys.alloc_id(), id_block_size)
        # ONE allocator per Meta, built here (no etcd call) so every thread shares it and
        # its batches: see seglake.meta.alloc for the ordering guarantee
        self.tso = TSO(kv, self.keys.alloc_tso(), max_clock_skew=max_clock_skew)

    @classmethod
    def from_settings(cls, settings) -> "Meta":
        return cls(KV.from_settings(settings), settings.etcd_root, settings.id_block_size,
                   settings.max_clock_skew)

    @cached_property
    def catalog(self):
        from seglake.meta.catalog import Catalog
        return Catalog(self)

    @cached_property
    def segments(self):
        from seglake.meta.segments import Segments
        return Segments(self)

    @cached_property
    def snapshots(self):
        from seglake.meta.snapshots import Snapshots
        return Snapshots(self)

    @cached_property
    def copyjobs(self):
        from seglake.meta.copyjobs import CopyJobs
        return CopyJobs(self)

    def close(self) -> None:
        self.kv.close()

    def __enter__(self) -> "Meta":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
