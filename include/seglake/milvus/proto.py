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
