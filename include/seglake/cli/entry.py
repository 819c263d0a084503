"""`main`: parse (every flag checked before anything loads or connects), load the
settings, run the command; every failure leaves through `output.fail`."""

from __future__ import annotations

from typing import Iterable

from seglake.config import Settings
from seglake.errors import SeglakeError
from seglake.cli.output import EXIT_INTERRUPTED, exit_code, fail
from seglake.cli.parser import build_parser


def main(argv: Iterable[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    args.prog = parser.chosen(args).prog
    settings = None
    try:
        settings = Settings.load()
        return args.fn(args, settings)
    except SeglakeError as e:
        return fail(args.prog, str(e), exit_code(e), settings)
    except KeyboardInterrupt:   # e.g. `jobs describe --watch`: stopped by the user, not a crash
        return fail(args.prog, "interrupted", EXIT_INTERRUPTED, settings)

