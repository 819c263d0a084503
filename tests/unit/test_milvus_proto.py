"""The tiny protobuf reader used on Milvus's etcd values (no Milvus needed)."""

import pytest

from seglake.milvus.proto import ProtoError, fields, one, packed, signed


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, wt: int, payload: bytes) -> bytes:
    return _varint(num << 3 | wt) + payload


def test_segment_info_like_message():
    seg_id = 470751527720914280
    binlog = _field(1, 0, _varint(43)) + _field(6, 0, _varint(9001))
    msg = (_field(1, 0, _varint(seg_id)) + _field(4, 2, _varint(5) + b"ch_v0")
           + _field(5, 0, _varint(43)) + _field(6, 0, _varint(4))
           + _field(2, 2, _varint(len(binlog)) + binlog) + _field(2, 2, _varint(len(binlog)) + binlog))
    f = fields(msg)
    assert one(f, 1) == seg_id and one(f, 4) == b"ch_v0" and one(f, 5) == 43 and one(f, 6) == 4
    assert [fields(b)[6] for b in f[2]] == [[9001], [9001]]
    assert one(f, 99, "absent") == "absent"


def test_negative_int64_packed_and_fixed():
    assert signed(one(fields(_field(1, 0, _varint((1 << 64) - 5))), 1)) == -5
    assert packed(_varint(1) + _varint(300) + _varint(2)) == [1, 300, 2]
    f = fields(_field(3, 1, b"\x01" * 8) + _field(4, 5, b"\x02" * 4))
    assert f[3] == [b"\x01" * 8] and f[4] == [b"\x02" * 4]


@pytest.mark.parametrize("bad", [b"\x08", b"\x12\x05ab", b"\x0b", b"\x08" + b"\xff" * 11])
def test_bad_bytes_raise(bad):
    with pytest.raises(ProtoError):
        fields(bad)
