"""Named fault points for crash-safety tests.

Engine code calls `faults.point("snapshot.before_commit")` at the places where a crash
matters. Nothing happens unless a test armed that point, in-process with
`with faults.inject("snapshot.before_commit"):` or across processes (Spark drivers and
executors, Airflow tasks) with SEGLAKE_FAULTS="snapshot.before_commit,...".
An armed point raises InjectedFault, or with "name:kill" SIGKILLs its own process;
"name:kill@N" / "name:raise@N" fire at the N-th time the point is reached in a process;
"name:sleep=S" slows every pass by S seconds (to catch a job mid-way from outside);
"name:gate=PATH" holds each pass until the file PATH exists (appending the process's pid
to PATH.reached first, so a test knows the job got there, acts, then opens the gate).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager

_armed: dict[str, str] = {}
_hits: dict[str, int] = {}
_lock = threading.Lock()


class InjectedFault(RuntimeError):
    pass


def _from_env() -> dict[str, str]:
    out = {}
    for item in filter(None, (x.strip() for x in os.environ.get("SEGLAKE_FAULTS", "").split(","))):
        name, _, action = item.partition(":")
        out[name] = action or "raise"
    return out


def point(name: str) -> None:
    action = _armed.get(name) or _from_env().get(name)
    if action is None:
        return
    action, _, at = action.partition("@")
    if at:
        with _lock:
            _hits[name] = _hits.get(name, 0) + 1
            if _hits[name] != int(at):
                return
    if action.startswith("sleep="):
        time.sleep(float(action[6:]))
        return
    if action.startswith("gate="):
        _gate(name, action[5:])
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFault(f"injected fault at {name}")


def _gate(name: str, path: str, timeout: float = 300.0) -> None:
    with open(f"{path}.reached", "a") as f:
        f.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise InjectedFault(f"gate {path} at {name} not opened within {timeout:g} s")
        time.sleep(0.05)


@contextmanager
def inject(name: str, action: str = "raise", at: int | None = None):
    with _lock:
        _armed[name] = f"{action}@{at}" if at else action
        _hits.pop(name, None)
    try:
        yield
    finally:
        with _lock:
            _armed.pop(name, None)
