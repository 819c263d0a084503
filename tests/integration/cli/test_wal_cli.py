"""`seglake ingest | delete | wal status|pause|resume` against real etcd and files."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from seglake import cli
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.log import pause_state

from wal_helpers import all_messages, inserted_pks, make_collection, pchannels


@pytest.fixture
def env(settings, monkeypatch):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    return settings


@pytest.fixture
def coll(meta, store, env):
    with WalClient(meta, store, env) as c:
        return make_collection(c, shards=2)


def _run(capsys, *argv):
    try:
        rc = cli.main(list(argv))
    except SystemExit as e:        # refused by the parser (a flag's type)
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def _all_pks(meta, store, settings, coll):
    return sorted(pk for p in pchannels(coll) for pk in inserted_pks(all_messages(meta, store, p, settings)))


def test_ingest_rows_and_status(meta, store, env, coll, capsys):
    rc, out, _ = _run(capsys, "ingest", "c1", "--rows", "25", "--batch-rows", "10", "--json")
    assert rc == 0
    res = json.loads(out)
    assert res["rows"] == 25 and res["batches"] == 3
    assert len(_all_pks(meta, store, env, coll)) == 25
    rc, out, _ = _run(capsys, "wal", "status", "--json")
    rows = {r["pchannel"]: r for r in json.loads(out)}
    assert set(rows) == set(pchannels(coll))
    for r in rows.values():
        assert r["term"] == 0 and r["fragments"] >= 2 and r["bytes"] > 0 and r["paused"] is False
        assert r["last_time_tick"] > 0 and r["consumers"][0]["lag_ms"] is None
    rc, out, _ = _run(capsys, "wal", "status")          # the table: times and lags in words, never None
    assert rc == 0 and "None" not in out, out
    assert "last tick (UTC)" in out and "no checkpoint yet (not flushed)" in out, out
    assert __import__("re").search(r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC", out), out


def test_ingest_parquet_file_txn_and_delete(meta, store, env, coll, tmp_path, capsys):
    f = tmp_path / "rows.parquet"
    rows = synthetic_rows(coll, 7, 500, shard=0)     # a transaction spans one vchannel
    pq.write_table(rows, f)
    assert _run(capsys, "ingest", "c1", "--file", str(f), "--txn")[0] == 0
    pks = rows.column("pk").to_pylist()
    assert _all_pks(meta, store, env, coll) == pks
    both = synthetic_rows(coll, 7, 900)               # rows of both shards: one transaction per vchannel
    pq.write_table(both, f)
    rc, out, _ = _run(capsys, "ingest", "c1", "--file", str(f), "--txn")
    assert rc == 0 and "(2 transaction(s), one per vchannel)" in out, out
    assert sorted(_all_pks(meta, store, env, coll)) == sorted(pks + both.column("pk").to_pylist())
    _assert_one_txn_per_vchannel(meta, store, env, coll, set(both.column("pk").to_pylist()))
    assert _run(capsys, "delete", "c1", "--pks", f"{pks[0]},{pks[1]}")[0] == 0
    deletes = [pk for p in pchannels(coll) for m in all_messages(meta, store, p, env) if m.type == "Delete"
               for pk in m.body.column("pk").to_pylist()]
    assert sorted(deletes) == sorted(pks[:2])


def _assert_one_txn_per_vchannel(meta, store, env, coll, pks: set) -> None:
    """The inserts of `pks` went in one committed transaction per vchannel, each holding
    only rows that route to its vchannel (as in Milvus: a transaction spans one vchannel)."""
    from seglake.wal import message as M
    from seglake.wal.client import route
    import numpy as np

    seen, seen_txns = set(), set()
    for p in pchannels(coll):
        msgs = all_messages(meta, store, p, env)
        for j, v in enumerate(coll.vchannels):
            ins = [m for m in msgs if m.type == M.INSERT and m.vchannel == v
                   and set(m.body.column("pk").to_pylist()) & pks]
            if not ins:
                continue
            txn_ids = {m.txn_id for m in ins}
            assert len(txn_ids) == 1 and 0 not in txn_ids, txn_ids
            assert txn_ids.isdisjoint(seen_txns)       # the scanner delivers committed transactions only
            seen_txns |= txn_ids
            got = np.array([pk for m in ins for pk in m.body.column("pk").to_pylist()], dtype=np.int64)
            assert (route(got, coll.shards) == j).all()
            seen |= set(got.tolist())
    assert seen == pks


def test_delete_txn_one_transaction_per_vchannel(meta, store, env, coll, capsys):
    from seglake.wal import message as M
    rc, out, _ = _run(capsys, "delete", "c1", "--pks", "1,2,3,4,5,6", "--txn")
    assert rc == 0 and "(2 transaction(s), one per vchannel)" in out, out
    dels = [m for p in pchannels(coll) for m in all_messages(meta, store, p, env) if m.type == M.DELETE]
    assert sorted(pk for m in dels for pk in m.body.column("pk").to_pylist()) == [1, 2, 3, 4, 5, 6]
    assert len({m.txn_id for m in dels}) == 2 and all(m.txn_id for m in dels)


@pytest.mark.parametrize("argv, match", [
    (["ingest", "c1", "--rows", "-5"], "argument --rows: '-5' is not an integer written in plain decimal"),
    (["ingest", "c1", "--rows", "0"], "argument --rows: 0 is out of range, must be >= 1"),
    (["ingest", "c1", "--rows", "007"], "argument --rows: '007' is not an integer written in plain decimal"),
    (["ingest", "c1", "--rows", "3", "--seed", "-5"], "argument --seed: '-5'"),     # was a numpy traceback
    (["ingest", "c1", "--rows", "3", "--seed", "4294967296"], "argument --seed: 4294967296 is out of range"),
    (["ingest", "c1", "--rows", "3", "--batch-rows", "+5"], "argument --batch-rows: '+5'"),
    (["ingest", "c1"], "exactly one of --file PATH or --rows N"),
    (["ingest", "c1", "--rows", "3", "--batch-rows", "0"], "--batch-rows"),
    (["ingest", "nope", "--rows", "3"], "collection 'nope' not found"),
    (["ingest", "c1", "--file", "/nonexistent.parquet"], "no such file"),
    (["delete", "c1", "--pks", "1,x"], "comma-separated integers"),
    (["wal", "pause"], "exactly one of --pchannel NAME or --all"),
    (["wal", "pause", "--pchannel", "seglake-dml_99"], "unknown pchannel"),
])
def test_cli_bad_input_clear_error_nothing_appended(meta, store, env, coll, capsys, argv, match):
    before = _all_pks(meta, store, env, coll)
    rc, _, err = _run(capsys, *argv)
    assert rc == 2 and match in err
    assert _all_pks(meta, store, env, coll) == before


def test_ingest_wrong_columns_file_refused(meta, store, env, coll, tmp_path, capsys):
    f = tmp_path / "bad.parquet"
    pq.write_table(synthetic_rows(coll, 3, 1).drop_columns(["price"]), f)
    rc, _, err = _run(capsys, "ingest", "c1", "--file", str(f))
    assert rc == 2 and "missing column(s) price" in err


def test_wal_pause_resume(meta, env, capsys):
    p = "seglake-dml_4"
    assert _run(capsys, "wal", "pause", "--pchannel", p, "--reason", "maintenance")[0] == 0
    assert pause_state(meta, p)["reason"] == "maintenance"
    rc, out, _ = _run(capsys, "wal", "status", "--pchannel", p, "--json")
    assert json.loads(out)[0]["paused"] is True
    assert _run(capsys, "wal", "resume", "--pchannel", p)[0] == 0
    assert pause_state(meta, p) is None
    assert _run(capsys, "wal", "pause", "--all")[0] == 0
    assert pause_state(meta, "seglake-dml_7")["key"].endswith("/_pause")
    assert _run(capsys, "wal", "resume", "--all")[0] == 0
    assert pause_state(meta, "seglake-dml_7") is None


def test_ingest_announces_collection_made_elsewhere(meta, store, env, capsys):
    from wal_helpers import schema
    c = meta.catalog.create("plain", schema(), shards=1)     # e.g. demo seed: no WAL message yet
    assert _run(capsys, "ingest", "plain", "--rows", "2")[0] == 0
    msgs = all_messages(meta, store, pchannels(c)[0], env)
    creates = [m for m in msgs if m.type == "CreateCollection" and m.collection_id == c.collection_id]
    assert len(creates) == 1 and creates[0].id < next(m.id for m in msgs if m.type == "Insert")
    assert _run(capsys, "ingest", "plain", "--rows", "2")[0] == 0   # announced once
    msgs = all_messages(meta, store, pchannels(c)[0], env)
    assert sum(m.type == "CreateCollection" and m.collection_id == c.collection_id for m in msgs) == 1


def test_status_reports_consumer_checkpoint_lag(meta, store, env, coll, capsys):
    from seglake.meta.alloc import compose_ts, physical_ms
    from seglake.wal.log import WalLog
    assert _run(capsys, "ingest", "c1", "--rows", "5")[0] == 0
    v = coll.vchannels[0]
    p = v.rsplit("_", 1)[0]
    last = WalLog(meta, store, p).state().last_tt
    cp_tt = compose_ts(physical_ms(last) - 1500)
    meta.kv.put(meta.keys.channel_checkpoint(v), json.dumps({"message_id": [1, 1, 0], "time_tick": cp_tt}))
    rc, out, _ = _run(capsys, "wal", "status", "--pchannel", p, "--json")
    consumer = json.loads(out)[0]["consumers"][0]
    assert consumer == {"vchannel": v, "checkpoint": [1, 1, 0], "lag_ms": 1500}


def test_an_ingest_that_failed_halfway_is_completed_by_a_rerun_with_its_producer_id_and_seq(
        meta, store, env, coll, tmp_path, capsys, monkeypatch):
    """Issue 26 (attack-producer): `seglake ingest` failing with AppendIncomplete said
    'Retry with seq=N' but the CLI had no way to give a seq or a producer id: a rerun
    appended everything again (the committed part twice). --producer-id names the run's
    producer, --seq retries a call: the rerun appends only what did not commit."""
    import pyarrow as pa

    from seglake.errors import SeglakeError
    from seglake.wal import writer as W

    path = tmp_path / "rows.parquet"
    rows = synthetic_rows(coll, 40, 1)
    pq.write_table(rows, path)
    (pa_, pb) = pchannels(coll)
    real = W.WalWriter._commit

    def b_fails(self, frag):
        if self.pchannel == pb:
            raise SeglakeError("etcd refused the write")
        return real(self, frag)
    monkeypatch.setattr(W.WalWriter, "_commit", b_fails)
    rc, out, err = _run(capsys, "ingest", "c1", "--file", str(path), "--batch-rows", "8",
                        "--producer-id", "nightly-load")
    monkeypatch.setattr(W.WalWriter, "_commit", real)
    assert rc != 0 and "seq=" in err, (rc, out, err)
    seq = int(err.split("seq=")[1].split()[0].rstrip(".,;)"))
    rc, out, err = _run(capsys, "ingest", "c1", "--file", str(path), "--batch-rows", "8",
                        "--producer-id", "nightly-load", "--seq", str(seq))
    assert rc == 0, err
    assert _all_pks(meta, store, env, coll) == sorted(rows.column("pk").to_pylist())
    # a --seq without the producer id it belongs to, or with --txn, is refused before anything
    for argv in (["--seq", str(seq)], ["--producer-id", "nightly-load", "--seq", str(seq), "--txn"],
                 ["--producer-id", "nightly-load", "--seq", "x"]):
        rc, out, err = _run(capsys, "ingest", "c1", "--file", str(path), *argv)
        assert rc != 0, argv
    rc, out, err = _run(capsys, "delete", "c1", "--pks", "1,2", "--producer-id", "nightly-load")
    assert rc == 0, err
    assert pa is not None


def test_seq_with_rows_is_refused_before_anything_a_rows_run_makes_new_rows(meta, store, env, coll, capsys):
    """Adversary s20 F5: `ingest --rows N --producer-id P` draws new pks at every run, so
    the same command + --seq N was another payload, refused only after it had allocated N
    ids. Now refused up front (no id allocated), naming --file as the retryable form."""
    rc, out, err = _run(capsys, "ingest", "c1", "--rows", "20", "--producer-id", "nightly", "--json")
    assert rc == 0, err
    seq = json.loads(out)["seq"]
    ids = meta.kv.get(meta.keys.alloc_id()).value
    rc, out, err = _run(capsys, "ingest", "c1", "--rows", "20", "--producer-id", "nightly", "--seq", str(seq))
    assert rc != 0 and "--seq cannot be used with --rows" in err and "--file" in err, (rc, err)
    assert meta.kv.get(meta.keys.alloc_id()).value == ids
    assert len(_all_pks(meta, store, env, coll)) == 20


def test_an_ingest_without_a_producer_id_that_failed_halfway_says_a_rerun_appends_again(
        meta, store, env, coll, tmp_path, capsys, monkeypatch):
    from seglake.errors import SeglakeError
    from seglake.wal import writer as W

    path = tmp_path / "rows.parquet"
    pq.write_table(synthetic_rows(coll, 40, 1), path)
    (pa_, pb) = pchannels(coll)
    real = W.WalWriter._commit

    def b_fails(self, frag):
        if self.pchannel == pb:
            raise SeglakeError("etcd refused the write")
        return real(self, frag)
    monkeypatch.setattr(W.WalWriter, "_commit", b_fails)
    rc, out, err = _run(capsys, "ingest", "c1", "--file", str(path), "--batch-rows", "8")
    assert rc != 0 and "no --producer-id" in err and "appends it again" in err, err
