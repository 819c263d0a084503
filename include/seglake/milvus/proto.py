"""A tiny protobuf wire-format reader: enough to read Milvus's etcd values (datapb, etcdpb)
without its internal .proto files, which no package on PyPI ships.

`fields(buf)` -> {field number: [values]}: varints as int, length-delimited as bytes (a
nested message is decoded again with `fields`), fixed64/fixed32 as raw bytes. Packed repeated
varints: `packed(b)`. Field numbers are those of milvus-io/milvus internal/proto/*.proto.
"""

from __future__ import annotations


class ProtoError(ValueError):
    """Bytes that are not a protobuf message."""


def varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(buf):
            raise ProtoError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ProtoError("varint too long")


def fields(buf: bytes) -> dict[int, list]:
    out: dict[int, list] = {}
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, i = varint(buf, i)
        elif wt == 2:
            n, i = varint(buf, i)
            if i + n > len(buf):
                raise ProtoError("truncated field")
            val, i = bytes(buf[i:i + n]), i + n
        elif wt == 1:
            val, i = bytes(buf[i:i + 8]), i + 8
        elif wt == 5:
            val, i = bytes(buf[i:i + 4]), i + 4
        else:
            raise ProtoError(f"wire type {wt}")
        if num == 0 or i > len(buf):
            raise ProtoError("bad field")
        out.setdefault(num, []).append(val)
    return out


def packed(b: bytes) -> list[int]:
    out, i = [], 0
    while i < len(b):
        v, i = varint(b, i)
        out.append(v)
    return out


def one(f: dict, num: int, default=None):
    v = f.get(num)
    return v[-1] if v else default


def signed(v: int) -> int:
    """int64 fields travel as two's-complement varints."""
    return v - (1 << 64) if v >= 1 << 63 else v


def scalar_field(buf: bytes) -> list:
    """The values of a schemapb.ScalarField (an Array field's element, as its binlog holds
    it): oneof 1 bool, 2 int32, 3 int64, 4 float, 5 double, 6 string (each a message whose
    field 1 is the repeated data, packed or not)."""
    import struct

    f = fields(buf)
    kinds = [k for k in f if k in (1, 2, 3, 4, 5, 6)]
    if len(kinds) > 1 or any(k not in (1, 2, 3, 4, 5, 6) for k in f):
        raise ProtoError(f"not an array of scalars (fields {sorted(f)})")
    if not kinds:
        return []
    kind = kinds[0]
    data = fields(f[kind][-1]).get(1, [])
    if kind == 6:
        return [v.decode() for v in data]
    if kind in (4, 5):
        raw = b"".join(data)
        w, c = (4, "f") if kind == 4 else (8, "d")
        if len(raw) % w:
            raise ProtoError("truncated float array")
        return list(struct.unpack(f"<{len(raw) // w}{c}", raw))
    vals = [x for v in data for x in (packed(v) if isinstance(v, bytes) else [v])]
    if kind == 1:
        return [bool(v) for v in vals]
    return [signed(v) if kind == 3 else (v - (1 << 64) if v >= 1 << 63 else v) for v in vals]
