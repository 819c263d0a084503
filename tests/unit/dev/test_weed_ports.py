"""SeaweedFS `weed mini` takes http port + 10000 as each server's gRPC port and refuses to
start when one of its ports is another's gRPC port ("port 48215 for WebDAV ... is
reserved for gRPC calculation"): a flake of the suite's session S3 server, seen on a
loaded machine (issue 26 #10). The ports WeedServer picks never collide that way."""

from __future__ import annotations

import itertools

from seglake.dev import devstack
from seglake.dev.devstack import WeedServer


def test_no_port_is_another_ports_grpc_port(monkeypatch, tmp_path):
    # the picks are 18215 then 28215 (= 18215 + 10000), then fresh ones
    handed = itertools.chain([18215, 28215, 28215], range(12000, 12100))
    monkeypatch.setattr(devstack, "free_port", lambda *range_: next(handed))
    monkeypatch.setattr(devstack, "_bindable", lambda port: True)
    ports = list(WeedServer(state_dir=tmp_path).ports.values())
    assert len(set(ports)) == len(ports), ports
    grpc = {p + 10000 for p in ports}
    assert not grpc & set(ports), ports


def test_server_ports_are_below_the_ephemeral_range(tmp_path):
    """A port from the kernel's ephemeral range can be taken by any outgoing connection
    between the pick and the server's bind ("bind: address already in use", seen with
    etcd while other sessions ran): the picks stay below it, gRPC ports included."""
    low = devstack._ephemeral_low()
    etcd = devstack.EtcdServer(state_dir=tmp_path / "e")
    weed = WeedServer(state_dir=tmp_path / "w")
    assert all(p < low for p in etcd.ports.values()), etcd.ports
    assert all(p + 10000 < low for p in weed.ports.values()), weed.ports
