"""Reaper for the cluster layer: `python reaper.py PID START` watches process PID (with
that /proc start time) and, once it is gone, SIGKILLs every process it saw below PID that
is still alive (same start time: a reused pid is never hit).

The servers tie themselves to the test process (devstack), but what Airflow's Spark
hook starts -- spark-submit and its Python driver -- does not; a driver whose cluster went
away would wait for executors forever. Runs in its own session: a kill of the test's
process group does not take it along."""

import os
import signal
import sys
import time


def stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in "ZX" else (int(fields[1]), fields[19])  # (ppid, start time)


def main(parent: int, start: str) -> None:
    seen: dict[int, str] = {}
    while (st := stat(parent)) is not None and st[1] == start:
        children: dict[int, list[int]] = {}
        starts = {}
        for d in os.listdir("/proc"):
            if d.isdigit() and (s := stat(int(d))):
                children.setdefault(s[0], []).append(int(d))
                starts[int(d)] = s[1]
        todo = [parent]
        while todo:
            for c in children.get(todo.pop(), []):
                if c not in seen and c != os.getpid():
                    seen[c] = starts[c]
                    todo.append(c)
        for pid in [p for p in seen if stat(p) is None]:
            del seen[pid]
        time.sleep(0.5)
    for pid, st in seen.items():
        cur = stat(pid)
        if cur is not None and cur[1] == st:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
