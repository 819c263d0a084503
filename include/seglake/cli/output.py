"""How the CLI prints: a table, or JSON with --json; and its exit codes."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from seglake.config import Settings
from seglake.errors import Conflict, NotFound, SeglakeError, StateError, ValidationError


EXIT_FAILED, EXIT_REFUSED, EXIT_INTERRUPTED = 1, 2, 130
REFUSED = (ValidationError, NotFound, StateError, Conflict)


def table(rows: list[dict], columns: list[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    out = [fmt.format(*columns), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*row) for row in cells]
    return "\n".join(out)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    return str(v)



def emit(args, data: Any, rows: list[dict] | None = None, columns: list[str] | None = None,
         text: str | None = None) -> None:
    if args.json:
        print(json.dumps(data, indent=2, default=str))
    elif text is not None:
        print(text)
    else:
        print(table(rows or [], columns or []))


def open_meta_store(settings: Settings):
    from seglake.meta import Meta
    from seglake.storage import open_store
    return Meta.from_settings(settings), open_store(settings)


# -- errors: the one way out for every failure -------------------------------------------
def _secret_values(settings: Settings | None) -> list[str]:
    """The values to mask: the loaded settings' secrets, else (config did not load) the
    secret SEGLAKE_* variables as given."""
    from dataclasses import fields

    from seglake import config

    if settings is not None:
        values = list(settings.secrets_env().values())
    else:
        values = [os.environ.get(config.ENV_PREFIX + f.name.upper(), "") for f in fields(config.Settings)
                  if f.metadata.get("secret")]
    return sorted({v for v in values if v}, key=len, reverse=True)  # longest first: no partial leftovers


def fail(prog: str, message: str, code: int, settings: Settings | None = None) -> int:
    """Print `prog: error: message` on stderr with every secret value masked; return `code`."""
    for secret in _secret_values(settings):
        message = message.replace(secret, "***")
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code


def exit_code(e: SeglakeError) -> int:
    return EXIT_REFUSED if isinstance(e, REFUSED) else EXIT_FAILED
