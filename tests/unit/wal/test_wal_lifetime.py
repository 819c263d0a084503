"""The WAL lifetime state machine (wal_lifetime.go), with an injected opener."""

from __future__ import annotations

import threading

import pytest

from seglake.wal.lifetime import INITIAL, Cancelled, ExpiredTerm, State, WalLifetime, is_before


class FakeWal:
    def __init__(self, term, log):
        self.term, self.log = term, log
        self.closed = False

    def close(self):
        self.closed = True
        self.log.append(("close", self.term))


class Opener:
    def __init__(self, fail_terms=(), gate: threading.Event | None = None):
        self.log: list = []
        self.fail_terms = set(fail_terms)
        self.gate = gate

    def __call__(self, term):
        if self.gate is not None:
            assert self.gate.wait(10)
        self.log.append(("open", term))
        if term in self.fail_terms:
            raise RuntimeError(f"open failed at {term}")
        return FakeWal(term, self.log)


@pytest.fixture
def lt():
    made = []

    def make(opener):
        x = WalLifetime(opener, "seglake-dml_0")
        made.append(x)
        return x
    yield make
    for x in made:
        x.close()


def test_state_order_matches_comment():
    seq = [State(-1, False), State(0, True), State(1, True), State(2, True), State(3, False), State(7, True)]
    for a, b in zip(seq, seq[1:]):
        assert is_before(a, b) and not is_before(b, a)
    assert is_before(State(1, True), State(1, False))
    assert not is_before(State(1, False), State(1, True))
    assert is_before(INITIAL, State(0, True))


def test_open_sequence_closes_previous_before_opening_next(lt):
    op = Opener()
    life = lt(op)
    w1 = life.open(1, timeout=5)
    w2 = life.open(2, timeout=5)
    assert w1.closed and not w2.closed and life.get_wal() is w2
    assert op.log == [("open", 1), ("close", 1), ("open", 2)]
    life.remove(2, timeout=5)
    assert w2.closed and life.get_wal() is None
    assert life.history == ["(1,true)", "(1,false)", "(2,true)", "(2,false)"]


def test_stale_term_ignored_with_expired_term(lt):
    op = Opener()
    life = lt(op)
    life.open(3, timeout=5)
    with pytest.raises(ExpiredTerm, match="expired term 2"):
        life.open(2, timeout=5)
    with pytest.raises(ExpiredTerm):
        life.open(3, timeout=5)  # same state again: not after the expectation
    assert op.log == [("open", 3)]


def test_remove_then_open_same_term_is_expired(lt):
    life = lt(Opener())
    life.open(1, timeout=5)
    life.remove(1, timeout=5)
    with pytest.raises(ExpiredTerm):
        life.open(1, timeout=5)


def test_failed_open_is_final_for_that_term(lt):
    op = Opener(fail_terms={2})
    life = lt(op)
    with pytest.raises(RuntimeError, match="open failed at 2"):
        life.open(2, timeout=5)
    assert life.current.term == 2 and not life.current.available
    with pytest.raises(ExpiredTerm):
        life.open(2, timeout=5)  # no retry at the same term
    with pytest.raises(RuntimeError):
        life.remove(2, timeout=5)  # the term's waiters see its error
    w = life.open(3, timeout=5)   # a newer term works
    assert w.term == 3 and op.log == [("open", 2), ("open", 3)]


def test_waiter_overtaken_by_newer_term_gets_expired(lt):
    gate = threading.Event()
    op = Opener(gate=gate)
    life = lt(op)
    errors = []

    def wait1():
        try:
            life.open(1, timeout=10)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    t = threading.Thread(target=wait1)
    t.start()
    import time
    time.sleep(0.1)
    life._expect(State(2, True), "x")   # a newer term arrives while term 1 is opening
    gate.set()
    t.join(10)
    assert not errors or isinstance(errors[0], ExpiredTerm)  # reached, or already overtaken
    w = life._wait(State(2, True), 10, None).wal
    assert w.term == 2 and ("close", 1) in op.log
    with pytest.raises(ExpiredTerm, match="request term 1 is expired"):
        life._wait(State(1, True), 1, None)   # a late waiter of term 1


def test_close_applied_when_waiter_cancelled(lt):
    gate = threading.Event()
    op = Opener()
    life = lt(op)
    w1 = life.open(1, timeout=5)
    op.gate = gate   # the next open blocks
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        life.open(2, cancel=cancel)
    # the caller is gone, yet the lifetime closes term 1 and opens term 2
    gate.set()
    w2 = life._wait(State(2, True), 5, None).wal
    assert w1.closed and w2.term == 2
    assert op.log.index(("close", 1)) < op.log.index(("open", 2))


def test_waiter_timeout_does_not_stop_the_transition(lt):
    gate = threading.Event()
    op = Opener(gate=gate)
    life = lt(op)
    with pytest.raises(Cancelled):
        life.open(1, timeout=0.1)
    gate.set()
    assert life._wait(State(1, True), 5, None).wal.term == 1


def test_lifetime_close_closes_current_wal():
    op = Opener()
    life = WalLifetime(op, "seglake-dml_0")
    w = life.open(1, timeout=5)
    life.close()
    assert w.closed
