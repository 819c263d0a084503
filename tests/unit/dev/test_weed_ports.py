"""SeaweedFS `weed mini` takes http port + 10000 as each server's gRPC port and refuses to
start when one of its ports is another's gRPC port ("port 48215 for WebDAV ... is
reserved for gRPC calculation"): a flake of the suite's session S3 server, seen on a
loaded machine (issue 26 #10). The ports WeedServer picks never collide that way."""

from __future__ import annotations

import itertools

from seglake.dev import devstack
from seglake.dev.devstack import WeedServer


def test_no_port_is_another_ports_grpc_port(monkeypatch, tmp_path):
    # the OS hands out 38215 then 48215 (= 38215 + 10000), then fresh ones
    handed = itertools.chain([38215, 48215, 48215], range(30000, 30100))
    monkeypatch.setattr(devstack, "free_port", lambda: next(handed))
    monkeypatch.setattr(devstack, "port_open", lambda port, host="127.0.0.1": False)
    ports = list(WeedServer(state_dir=tmp_path).ports.values())
    assert len(set(ports)) == len(ports), ports
    grpc = {p + 10000 for p in ports}
    assert not grpc & set(ports), ports
