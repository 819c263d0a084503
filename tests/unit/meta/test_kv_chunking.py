import pytest

from seglake.errors import SeglakeError
from seglake.meta.kv import MAX_TXN_BYTES, MAX_TXN_OPS, Delete, Put, absent, chunk_ops


def test_chunks_respect_op_count_and_order():
    ops = [Put(f"k{i:04d}", b"v") for i in range(1000)]
    chunks = chunk_ops(ops)
    assert [len(c) for c in chunks] == [128] * 7 + [104]
    assert [op for c in chunks for op in c] == ops


def test_chunks_respect_bytes_with_the_guard_counted_in_each():
    big = b"x" * 300_000
    ops = [Put(f"k{i}", big) for i in range(10)]
    chunks = chunk_ops(ops, guard=[absent("parent")])
    assert all(sum(o.size() for o in c) <= MAX_TXN_BYTES for c in chunks)
    assert [len(c) for c in chunks] == [4, 4, 2]


def test_single_op_over_limit_is_refused():
    with pytest.raises(SeglakeError, match="over the"):
        chunk_ops([Put("k", b"x" * (MAX_TXN_BYTES + 1))])


def test_mixed_ops():
    ops = [Put("a", "1"), Delete("b"), Delete("c/", prefix=True)]
    assert chunk_ops(ops) == [ops]
    assert MAX_TXN_OPS == 128


def test_guarded_chunks_leave_one_slot_for_the_write_marker():
    ops = [Put(f"k{i:04d}", b"v") for i in range(300)]
    chunks = chunk_ops(ops, guard=[absent("parent")])
    assert [len(c) for c in chunks] == [127, 127, 46]
    assert [op for c in chunks for op in c] == ops
