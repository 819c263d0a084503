"""WAL key builders (meta/keys.py) and fragment paths (storage/layout.py)."""

from __future__ import annotations

import pytest

from seglake.meta import keys as K
from seglake.storage import layout
from seglake.wal.log import CorruptFragment, decode_fragment, encode_fragment, validate_pchannel


def test_wal_etcd_keys():
    k = K.Keys("root")
    assert K.wal_log(k, "seglake-dml_3") == "root/wal/seglake-dml_3/log"
    assert K.wal_pause(k, "seglake-dml_3") == "root/wal/seglake-dml_3/pause"
    assert K.wal_pause(k) == "root/wal/_pause"
    assert k.wal_term("seglake-dml_3") == "root/wal/seglake-dml_3/term"
    with pytest.raises(ValueError):
        K.wal_log(k, "a/b")


def test_fragment_key_roundtrip_and_refusals():
    key = layout.wal_fragment("seglake-dml_3", 42)
    assert key == "wal/seglake-dml_3/00000000000000000042.frag"
    assert layout.parse_wal_fragment(key) == ("seglake-dml_3", 42)
    for bad in ("wal/seglake-dml_3/42.frag", "wal/seglake-dml_3/00000000000000000000.frag",
                "wal/x/y/00000000000000000001.frag", "wal/seglake-dml_3/0000000000000000000a.frag",
                "insert_log/1/2/3/4/5"):
        assert layout.parse_wal_fragment(bad) is None
    for n in (0, -1, True, 1.0):
        with pytest.raises(ValueError):
            layout.wal_fragment("seglake-dml_3", n)


@pytest.mark.parametrize("name", ["seglake-dml_0", "seglake-dml_15"])
def test_pchannel_names_accepted(name):
    assert validate_pchannel(name) == name


@pytest.mark.parametrize("name", ["seglake-dml_16", "seglake-dml_01", "seglake-dml_", "dml_1", "seglake-dml_1\n", 7])
def test_pchannel_names_refused(name):
    with pytest.raises(ValueError, match="unknown pchannel"):
        validate_pchannel(name)


def test_fragment_codec_detects_damage():
    data = encode_fragment(2, 5, [b"alpha", b"beta" * 100])
    term, recs = decode_fragment("k", data, 5)
    assert term == 2 and [bytes(r) for r in recs] == [b"alpha", b"beta" * 100]
    with pytest.raises(CorruptFragment, match="k: truncated"):
        decode_fragment("k", data[:-3])
    with pytest.raises(CorruptFragment, match="header says fragment 5"):
        decode_fragment("k", data, 6)
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        with pytest.raises(CorruptFragment, match="^WAL fragment k: "):
            decode_fragment("k", bytes(flipped), 5)
