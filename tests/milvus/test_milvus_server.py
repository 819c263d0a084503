"""The Milvus test server: healthy on its own loopback ports, two at once without a clash
(ports, etcd roots, Milvus's own pid file under /run/milvus), and nothing left behind when
the process that started it is SIGKILLed (the devstack watchdog)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bundle_helper import close_sessions

from seglake.dev.devstack import pid_alive

pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus]


def _listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of the TCP sockets `pid` listens on (from /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:   # LISTEN
                addr, port = cols[1].split(":")
                out.add((addr, int(port, 16)))
    return out


def _pid_file(alias: str) -> Path | None:
    for d in ("/run/milvus", "/tmp/milvus"):
        p = Path(d) / f"standalone-{alias}.pid"
        if p.exists():
            return p
    return None


def test_server_healthy_on_its_own_loopback_ports(milvus_server, milvus):
    assert milvus_server.healthy()
    assert milvus({"op": "version"})[0]["version"].startswith("v2.3.5")
    pid = milvus_server.proc.pid
    listening = _listening(pid)
    ports = {p for _, p in listening}
    assert {milvus_server.ports[k] for k in ("proxy", "metrics", "root_coord", "data_coord",
                                               "query_coord", "query_node", "data_node",
                                               "index_node")} <= ports
    # every socket it listens on is one of the ports picked for it (no default port:
    # 19530, 9091, 2379/2380 of an embedded etcd, 4222 of natsmq)
    assert ports <= set(milvus_server.ports.values()), sorted(ports - set(milvus_server.ports.values()))
    # Milvus 2.3.5 has no listen-address setting: its gRPC and metrics servers bind ":port"
    # (all interfaces). What it advertises is loopback: every session in its etcd has a
    # 127.0.0.1 address, so no component is ever reached through another interface.
    from seglake.meta.kv import KV

    with KV(milvus_server.etcd_endpoint, timeout=10) as kv:
        sessions = [json.loads(i.value) for i in kv.range(f"{milvus_server.etcd_root}/meta/session/")
                    if i.value.startswith(b"{")]
    addrs = {s["ServerName"]: s.get("Address", "") for s in sessions if "ServerName" in s}
    assert {"rootcoord", "datacoord", "querycoord", "proxy", "querynode", "datanode",
            "indexnode"} <= set(addrs), addrs
    assert all(a.startswith("127.0.0.1:") for a in addrs.values()), addrs
    assert 2379 not in ports and 2380 not in ports   # no embedded etcd
    pf = _pid_file(milvus_server.alias)
    assert pf is not None and pf.read_text().strip() == str(pid)
    # no secret in its arguments or environment
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    secret = milvus_server.s3.secret_key.encode()
    assert secret not in cmdline and secret not in environ
    assert (milvus_server.state_dir / "configs" / "milvus.yaml").stat().st_mode & 0o077 == 0
    assert secret not in milvus_server.log_file.read_bytes()
    for f in (milvus_server.state_dir / "logs").rglob("*"):
        assert not f.is_file() or secret not in f.read_bytes(), f
    print(f"\nMILVUS rss {milvus_server.rss_bytes() / 2**20:.0f} MiB, "
          f"start-to-healthy {milvus_server.healthy_after:.1f}s")


def test_two_servers_at_once_do_not_clash(milvus_server, milvus_at, etcd_server, tmp_path):
    """A second server (local storage) beside the worker's: own ports, own etcd root, own
    pid file; stopping it leaves the first one serving, with its pid file."""
    from seglake.dev.milvus import MilvusServer
    from seglake.meta.kv import KV
    from seglake.milvus.etcdmeta import MilvusMeta

    other = MilvusServer(state_dir=tmp_path / "m2", etcd_endpoint=etcd_server.endpoint)
    other.start(timeout=120)
    try:
        assert not set(other.ports.values()) & set(milvus_server.ports.values())
        assert other.etcd_root != milvus_server.etcd_root
        pf1, pf2 = _pid_file(milvus_server.alias), _pid_file(other.alias)
        assert pf1 and pf2 and pf1 != pf2
        assert pf2.read_text().strip() == str(other.proc.pid)
        assert pf1.read_text().strip() == str(milvus_server.proc.pid)
        name = f"only_{uuid.uuid4().hex[:6]}"
        milvus_at(other.address, {"op": "create", "name": name, "partitions": []})
        with KV(etcd_server.endpoint, timeout=10) as kv:
            assert MilvusMeta(kv, other.etcd_root).collection(name) is not None
            assert MilvusMeta(kv, milvus_server.etcd_root).collection(name) is None
        print(f"\nMILVUS second server: start-to-healthy {other.healthy_after:.1f}s, "
              f"rss {other.rss_bytes() / 2**20:.0f} MiB")
    finally:
        close_sessions(other.address)
        t0 = time.time()
        pid = other.proc.pid
        other.stop()
        print(f"MILVUS stop {time.time() - t0:.1f}s")
    assert not pid_alive(pid)
    assert _pid_file(other.alias) is None             # it removed its own pid file only
    assert _pid_file(milvus_server.alias) is not None
    assert milvus_server.healthy()
    assert milvus_at(milvus_server.address, {"op": "version"})[0]["version"].startswith("v2.3")


_STARTER = r"""
import json, sys, time
from pathlib import Path
from seglake.dev.milvus import MilvusServer
s = MilvusServer(state_dir=Path(sys.argv[1]), etcd_endpoint=sys.argv[2]).start(timeout=120)
print(json.dumps({"pid": s.proc.pid, "alias": s.alias, "watchdog": s.watchdog.pid}), flush=True)
time.sleep(600)
"""


def test_killed_test_process_leaves_no_server(milvus_python, etcd_server, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    starter = subprocess.Popen([sys.executable, "-c", _STARTER, str(tmp_path / "m"),
                                etcd_server.endpoint], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = starter.stdout.readline()
        assert line, "the starter died before its Milvus was healthy"
        info = json.loads(line)
        assert pid_alive(info["pid"])
    finally:
        starter.send_signal(signal.SIGKILL)
        starter.wait()
    deadline = time.time() + 30
    while time.time() < deadline and (pid_alive(info["pid"]) or pid_alive(info["watchdog"])):
        time.sleep(0.2)
    assert not pid_alive(info["pid"]), "Milvus outlived the killed test process"
    assert not pid_alive(info["watchdog"])
    # a SIGKILLed Milvus may leave its pid file: the next start (or stop) sweeps it
    from seglake.dev.milvus import sweep_stale_pid_files

    sweep_stale_pid_files()
    assert _pid_file(info["alias"]) is None


def test_port_taken_before_bind_is_retried_with_fresh_ports(milvus_python, etcd_server, tmp_path):
    """Another process takes one of its ports between the pick and Milvus's bind (a shared
    machine): Milvus panics with "address already in use", the start retries with fresh
    ports instead of failing the test run."""
    import socket

    from seglake.dev.milvus import MilvusServer

    m = MilvusServer(state_dir=tmp_path / "m", etcd_endpoint=etcd_server.endpoint)
    squat = socket.socket()
    squat.bind(("0.0.0.0", m.ports["proxy_internal"]))
    squat.listen()
    taken = m.ports["proxy_internal"]
    try:
        m.start(timeout=120)
        assert m.ports["proxy_internal"] != taken and m.healthy()
        assert b"address already in use" in m.log_file.read_bytes()
    finally:
        m.stop()
        squat.close()


def test_milvus_stack_up_status_down(milvus_python, etcd_server, tmp_path):
    """`make milvus-up / milvus-status / milvus-down` (MilvusStack): detached servers found
    again from another process's view (stack.json, 0600), stopped by pid, nothing left."""
    from seglake.dev.milvus import MilvusStack

    stack = MilvusStack(tmp_path / "milvus", etcd_endpoint=etcd_server.endpoint)
    try:
        st = stack.up(timeout=120)
        assert st["milvus"] == "up" and st["s3"] == "up"
        assert (tmp_path / "milvus" / "stack.json").stat().st_mode & 0o077 == 0
        again = MilvusStack(tmp_path / "milvus", etcd_endpoint=etcd_server.endpoint)
        st2 = again.status()
        assert (st2["pid"], st2["address"], st2["alias"]) == (st["pid"], st["address"], st["alias"])
        assert again.up()["pid"] == st["pid"]          # up again: the running one, not a second
    finally:
        stopped = MilvusStack(tmp_path / "milvus", etcd_endpoint=etcd_server.endpoint).down()
    assert len(stopped) == 2
    assert not pid_alive(st["pid"]) and not pid_alive(st["s3_pid"])
    assert _pid_file(st["alias"]) is None
    assert stack.status()["milvus"] == "down"
