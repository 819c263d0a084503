"""`seglake restore-database --collections`: an empty value once meant 'every collection'
(a variable left empty in a script restored the whole database); now every form that names
no collection, an empty name or one twice is refused by the parser, naming the flag and
the value, before anything is read."""

from __future__ import annotations

import pytest

from seglake import cli


@pytest.mark.parametrize("value, said", [
    ("", "'' names no collection"),
    (" ", "' ' names no collection"),
    ("a,", "'a,': collection name 2 is empty"),
    (",a", "',a': collection name 1 is empty"),
    ("a,a", "'a,a' names 'a' twice"),
    ("a,bad name", "invalid collection name 'bad name'"),
])
def test_bad_collections_are_refused_by_the_parser(value, said, capsys, monkeypatch):
    monkeypatch.setenv("SEGLAKE_ETCD_ENDPOINT", "127.0.0.1:1")   # nothing may be asked of etcd
    try:
        rc = cli.main(["restore-database", "--as-of", "2026-11-27T12:00:00Z", "--suffix", "_x", "--collections", value])
    except SystemExit as e:   # refused by the parser
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and "argument --collections: " in err and said in err, err


def test_names_are_split_and_kept_in_order():
    from seglake.cli.args import names_arg

    assert names_arg("collection")(" b, a ") == ["b", "a"]
