"""Tie a child process's life to its parent: Linux's PR_SET_PDEATHSIG, so a SIGKILLed
driver does not leave workers (or servers) running behind it."""

from __future__ import annotations

import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """In the child: receive `sig` when the parent THREAD that started it exits. Call it
    from a preexec_fn or a pool initializer. A no-op where prctl is missing."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (AttributeError, OSError):  # not Linux
        pass


def worker_of(parent_pid: int) -> None:
    """Pool initializer: SIGKILL this worker when its driver dies, and exit at once if
    the driver is already gone (died between the fork and the prctl)."""
    die_with_parent(signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)
