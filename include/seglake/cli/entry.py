"""`main`: parse (every flag checked before anything loads or connects), load the
settings, run the command; every failure leaves through `output.fail`."""

from __future__ import annotations

import os
import sys
from typing import Iterable

from seglake.config import Settings
from seglake.errors import SeglakeError, Unavailable
from seglake.cli.output import EXIT_FAILED, EXIT_INTERRUPTED, exit_code, fail
from seglake.cli.parser import build_parser


def main(argv: Iterable[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    args.prog = parser.chosen(args).prog
    settings = None
    try:
        settings = Settings.load()
        code = args.fn(args, settings)
        sys.stdout.flush()   # a closed pipe is met here, not in the interpreter's exit
        return code
    except SeglakeError as e:
        return fail(args.prog, str(e) + _stack_hint(e, settings), exit_code(e), settings)
    except KeyboardInterrupt:   # e.g. `jobs describe --watch`: stopped by the user, not a crash
        return fail(args.prog, "interrupted", EXIT_INTERRUPTED, settings)
    except BrokenPipeError:     # the reader went away (`seglake ... | head`): no traceback, output cut short
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED



def _stack_hint(e: SeglakeError, settings: Settings | None) -> str:
    """What to do when etcd is unreachable because the local stack is not up (the
    newcomer's first command before `make up`): '' otherwise."""
    if not isinstance(e, Unavailable) or settings is None or "," in settings.etcd_endpoint:
        return ""
    host, _, port = settings.etcd_endpoint.rpartition(":")
    if host not in ("127.0.0.1", "localhost"):
        return ""
    from seglake.cli.ops import _stack_etcd

    try:
        if _stack_etcd(settings).running_pid():
            return ""
    except (SeglakeError, ValueError):
        return ""
    return f" (the local etcd on {settings.etcd_endpoint} is not running: start it with `make up` or `seglake stack up`)"
