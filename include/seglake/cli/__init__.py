"""`seglake` command line: demo data, inspection, local stack.

The package, one module per command group (collections, snapshots, jobs, gc, wal,
backup, ops: config/stack/cluster), with output (tables, JSON, exit codes, `fail`),
args (flag types), parser (the command tree) and entry (`main`). `python -m seglake.cli`
runs `main`.

Configuration comes from the environment (SEGLAKE_CONFIG JSON, SEGLAKE_<KEY>), see
`seglake config show`. Every listing prints a table, or JSON with --json.

Every failure a user can cause or meet goes through `fail()`: one line on stderr,
`seglake <command>: error: <message>` (argparse's own format), no traceback, any
configured secret's value masked, and one exit code per outcome:
  0  done
  1  the operation ran and failed: etcd or the store unreachable, corrupt data, files
     that could not be deleted, `verify` found problems, a watched job Failed
  2  refused as asked, nothing done: bad usage or value, a name that does not exist, a
     state or a conflict that forbids it (ValidationError, NotFound, StateError, Conflict)
  3  `stack status` / `cluster status`: down
  130 interrupted (Ctrl-C)
"""

from __future__ import annotations

from seglake.cli.entry import main
from seglake.cli.output import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_REFUSED, REFUSED, emit, exit_code, fail, table
from seglake.cli.parser import build_parser

__all__ = ["main", "build_parser", "emit", "table", "fail", "exit_code", "EXIT_FAILED", "EXIT_REFUSED",
           "EXIT_INTERRUPTED", "REFUSED"]

from seglake.facade import seal  # noqa: E402

seal(__name__)
