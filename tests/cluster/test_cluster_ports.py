"""`seglake cluster up` on a busy machine: the ports are picked free and bound a moment
later by the servers, so another program may take one in between. `up` then stops what
it started and starts again on new ports (bounded: 3 attempts), instead of failing."""

import socket

import pytest

pytestmark = [pytest.mark.cluster]


def test_up_starts_again_on_new_ports_when_a_picked_port_was_taken_meanwhile(tmp_path, monkeypatch):
    from seglake.dev.cluster import ClusterStack, missing_prerequisites

    if missing_prerequisites():
        pytest.skip("this machine cannot start the cluster: " + "; ".join(missing_prerequisites()))
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    stack = ClusterStack(base=tmp_path / "cluster", members=1, workers=0)  # (the smallest cluster)
    states = []
    real = stack._new_state

    def new_state():
        st = real()
        if not states:
            st["etcd"][0]["client"] = port  # what another program grabbed after the pick
        states.append(st)
        return st

    monkeypatch.setattr(stack, "_new_state", new_state)
    try:
        assert stack.up(timeout=120) == "started"
        assert len(states) == 2
        assert stack.etcd[0].ports["client"] != port and stack.healthy()
    finally:
        stack.down()
        taken.close()
    assert all(stack.owned_pid(s) is None for s in stack._servers)
