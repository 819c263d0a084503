"""Servers started for tests and benches die with the process that started them, even
when it is SIGKILLed (issue 8 item 22); `seglake stack up` servers (detach) outlive it."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from seglake.dev.devstack import pid_alive, stop_pid

_STARTER = """
import json, sys, threading, time
from pathlib import Path
from seglake.dev.devstack import EtcdServer, Server, WeedServer

class Forking(Server):  # a server with a child of its own (like a supervisor)
    def command(self):
        return ["sh", "-c", "sleep 600 & sleep 600"]

    def healthy(self):
        return True

root, kinds, how = Path(sys.argv[1]), sys.argv[2].split(","), sys.argv[3]
make = {"etcd": EtcdServer, "weed": WeedServer, "forking": Forking}
servers = []

def start():
    for k in kinds:
        servers.append(make[k](state_dir=root / k).start(timeout=60, detach=how == "detach"))

if how == "thread":  # no parent-death signal then: only the watchdog can clean up
    t = threading.Thread(target=start)
    t.start()
    t.join()
else:
    start()
time.sleep(0.5)
print(json.dumps({"servers": [s.proc.pid for s in servers],
                  "watchdogs": [s.watchdog.pid for s in servers if s.watchdog]}), flush=True)
if how == "detach":
    sys.exit(0)
time.sleep(600)
"""


def _start(tmp_path, *mode):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, "-c", _STARTER, str(tmp_path), *mode],
                            stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    assert line, "the starter died before starting its servers"
    return proc, json.loads(line)


def _gone_within(pids, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not any(pid_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def _descendants(pid):
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    children = {}
    for line in out.splitlines():
        p, pp = map(int, line.split())
        children.setdefault(pp, []).append(p)
    found, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


@pytest.mark.parametrize("kinds,how", [("etcd,weed", "main"), ("etcd,forking", "thread")])
def test_servers_and_their_children_die_when_the_starter_is_sigkilled(tmp_path, kinds, how):
    proc, started = _start(tmp_path, kinds, how)
    pids = started["servers"] + [c for s in started["servers"] for c in _descendants(s)]
    try:
        assert len(pids) > len(started["servers"]) or "forking" not in kinds  # the child exists
        assert all(pid_alive(p) for p in pids) and len(started["watchdogs"]) == len(started["servers"])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _gone_within(pids, 8), [p for p in pids if pid_alive(p)]
        assert _gone_within(started["watchdogs"], 5)  # the watchdogs leave too
    finally:
        for p in pids:  # only if the test failed: these are the pids this test started
            stop_pid(p, timeout=5)


def test_a_killed_starter_not_yet_reaped_counts_as_gone(tmp_path):
    """Its parent has not waited for it yet (a zombie): the watchdog still acts."""
    proc, started = _start(tmp_path, "etcd", "thread")
    try:
        os.kill(proc.pid, signal.SIGKILL)
        assert _gone_within(started["servers"], 8)
    finally:
        proc.wait(timeout=10)
        for p in started["servers"]:
            stop_pid(p, timeout=5)


def test_stop_takes_the_servers_children_too(tmp_path):
    from seglake.dev.devstack import Server

    class Forking(Server):
        def command(self):
            return ["sh", "-c", "sleep 600 & sleep 600"]

        def healthy(self):
            return True

    server = Forking(state_dir=tmp_path / "f").start()
    time.sleep(0.5)
    pids = [server.proc.pid, *_descendants(server.proc.pid)]
    assert len(pids) >= 2
    server.stop(timeout=5)
    assert _gone_within(pids, 5)


def test_detached_servers_outlive_the_cli(tmp_path):
    proc, started = _start(tmp_path, "etcd", "detach")
    pid = started["servers"][0]
    try:
        assert proc.wait(timeout=30) == 0 and started["watchdogs"] == []
        time.sleep(1.5)
        assert pid_alive(pid)
    finally:
        stop_pid(pid, timeout=10)
    assert not pid_alive(pid)


def test_a_server_killed_behind_our_back_restarts_with_one_watchdog(tmp_path):
    from seglake.dev.devstack import EtcdServer

    server = EtcdServer(state_dir=tmp_path / "e").start(timeout=30)
    first_dog = server.watchdog.pid
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=10)
    try:
        server.start(timeout=30)
        assert server.healthy() and server.watchdog.pid != first_dog
        assert _gone_within([first_dog], 5)
    finally:
        server.stop()
    assert server.watchdog is None
