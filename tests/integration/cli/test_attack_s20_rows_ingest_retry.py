"""Adversary s20 (issue 26 #2, README "Ingest and status": "a failed run says seq=N; the
same command + --seq N completes it"). `seglake ingest --rows N --producer-id P` draws its
synthetic pks from the id allocator at every run, so the same command retried with
--seq N is another payload: refused, never completing the call (and each try allocates N
ids before it is refused). Here the first run committed whole (its answer lost): the
retry must be answered, appending nothing. Real etcd and files."""

from __future__ import annotations

import json

import pytest

from seglake import cli
from seglake.wal.client import WalClient

from wal_helpers import all_messages, inserted_pks, make_collection, pchannels


@pytest.fixture
def env(settings, monkeypatch):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    return settings


def _run(capsys, *argv):
    try:
        rc = cli.main(list(argv))
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_same_ingest_rows_command_retried_with_its_seq_is_answered_not_refused(meta, store, env, capsys):
    with WalClient(meta, store, env) as c:
        coll = make_collection(c, shards=2)
    argv = ["ingest", "c1", "--rows", "20", "--producer-id", "nightly", "--json"]
    rc, out, err = _run(capsys, *argv)
    assert rc == 0, err
    seq = json.loads(out)["seq"]
    rc, out, err = _run(capsys, *argv, "--seq", str(seq))     # the documented retry of that call
    pks = sorted(pk for p in pchannels(coll) for pk in inserted_pks(all_messages(meta, store, p, env)))
    assert rc == 0 and len(pks) == 20, f"retry of seq {seq}: exit {rc}, {err.strip()[:300]}; {len(pks)} rows in the log"
