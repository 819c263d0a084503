"""`seglake milvus ...`: a real Milvus server. `restore` (cli/milvus_restore.py) restores a
capture into it."""

from __future__ import annotations


def add_milvus_parsers(sub, common, coll_t, snap_t, number_arg) -> None:
    from seglake.cli.milvus_restore import add_restore_parser

    m = sub.add_parser("milvus", help="a Milvus server: restore a capture into it").add_subparsers(
        dest="action", required=True)
    add_restore_parser(m, common, coll_t, snap_t, number_arg)
