"""A bloom filter over int64 primary keys, built and queried with numpy (no per-key
Python loop: 1M keys built in ~0.2 s, queried in ~0.1 s on one core here).

    bf = BloomFilter.build(pks, fp=0.001)
    bf.may_contain(np.array([...], np.int64))  -> bool array (never False for a key added)
    bf.to_json() -> {"m": bits, "k": hashes, "b": base64 bits, "hash": HASH}; BloomFilter.from_json

Sizing is the textbook one: m = ceil(-n ln p / ln(2)^2) bits, k = round(m / n ln 2)
hashes (p = 0.001: ~14.4 bits and 10 hashes per key). Hashing: double hashing
h_i = h1 + i * h2 (mod 2^64), h1 and h2 (odd) two splitmix64 finalizers of the key,
reduced to a bit position as (h_i >> 32) * m >> 32 (h_i mod m when m > 2^32).
Bit j of the filter is bit (j & 7) of byte j >> 3 (little-endian bit order), the bytes
are stored base64 in "b". This is seglake's own layout, named by "hash" so a reader can
refuse a filter it does not know; it is NOT bit-compatible with Milvus's bloom filters
(the stats log's other fields are Milvus-like).
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass

import numpy as np

HASH = "splitmix64-dh"
MIN_BITS = 64
MAX_BITS = 1 << 36      # 8 GiB of bits: far beyond any segment
_C1, _C2, _C3 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)
_SALT = np.uint64(0xD6E8FEB86659FD93)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on uint64 (wrapping arithmetic)."""
    x = x + _C3
    x = (x ^ (x >> np.uint64(30))) * _C1
    x = (x ^ (x >> np.uint64(27))) * _C2
    return x ^ (x >> np.uint64(31))


def size_for(n: int, fp: float) -> tuple[int, int]:
    """(m bits, k hashes) for n keys at false-positive rate fp."""
    if not 0 < fp < 1:
        raise ValueError(f"bloom false-positive rate must be in (0, 1), got {fp!r}")
    n = max(1, int(n))
    m = int(math.ceil(-n * math.log(fp) / (math.log(2) ** 2)))
    m = min(MAX_BITS, max(MIN_BITS, (m + 7) // 8 * 8))
    k = max(1, min(30, int(round(m / n * math.log(2)))))
    return m, k


@dataclass(frozen=True)
class BloomFilter:
    m: int                 # bits
    k: int                 # hashes
    bits: np.ndarray       # uint8, m / 8 bytes

    def _positions(self, keys: np.ndarray):
        """The k rows of bit positions (uint64 arrays, one per hash) of `keys`."""
        x = np.ascontiguousarray(keys, dtype=np.int64).view(np.uint64)
        h = _mix(x)
        h2 = _mix(x ^ _SALT) | np.uint64(1)
        m = np.uint64(self.m)
        small = self.m <= 1 << 32
        for _ in range(self.k):
            # the high 32 bits scaled into [0, m) (Lemire's reduction, no division) when m fits
            yield ((h >> np.uint64(32)) * m) >> np.uint64(32) if small else h % m
            h = h + h2

    @classmethod
    def build(cls, keys, fp: float = 0.001, *, m: int | None = None, k: int | None = None) -> "BloomFilter":
        keys = np.asarray(keys, dtype=np.int64)
        mm, kk = size_for(len(keys), fp)
        f = cls(m or mm, k or kk, np.zeros((m or mm) // 8, dtype=np.uint8))
        if len(keys):
            flags = np.zeros(f.m, dtype=bool)
            for row in f._positions(keys):      # k rows (a handful), each vectorised
                flags[row] = True
            f.bits[:] = np.packbits(flags, bitorder="little")
        return f

    def may_contain(self, keys) -> np.ndarray:
        """bool per key: False = certainly not added; True = added, or a false positive."""
        keys = np.asarray(keys, dtype=np.int64)
        out = np.ones(len(keys), dtype=bool)
        if not len(keys):
            return out
        for row in self._positions(keys):
            out &= ((self.bits[row >> np.uint64(3)] >> (row & np.uint64(7)).astype(np.uint8)) & 1).astype(bool)
        return out

    def union(self, other: "BloomFilter") -> "BloomFilter":
        if (self.m, self.k) != (other.m, other.k):
            raise ValueError("bloom filters of different shapes cannot be merged")
        return BloomFilter(self.m, self.k, self.bits | other.bits)

    def to_json(self) -> dict:
        return {"m": self.m, "k": self.k, "hash": HASH, "b": base64.b64encode(self.bits.tobytes()).decode()}

    @classmethod
    def from_json(cls, d: dict) -> "BloomFilter":
        if d.get("hash", HASH) != HASH:
            raise ValueError(f"unknown bloom filter hashing {d.get('hash')!r} (this reader knows {HASH!r})")
        m, k = int(d["m"]), int(d["k"])
        bits = np.frombuffer(base64.b64decode(d["b"]), dtype=np.uint8).copy()
        if m <= 0 or m % 8 or len(bits) != m // 8 or not 1 <= k <= 64:
            raise ValueError(f"malformed bloom filter: m={m}, k={k}, {len(bits)} bytes")
        return cls(m, k, bits)
