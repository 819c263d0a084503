"""A command run before `make up` (the local etcd not running) fails with exit 1 and a
message that says what to do; when the stack's etcd runs (its pid file names a live
process) the message is the plain connection error, no hint."""

import os

import pytest

from seglake import config
from seglake.cli import main
from seglake.cli.ops import _stack_etcd
from seglake.dev.devstack import free_port


@pytest.fixture
def no_stack(tmp_path, monkeypatch):
    for k in list(os.environ):
        if k.startswith("SEGLAKE_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("SEGLAKE_ETCD_ENDPOINT", f"127.0.0.1:{free_port()}")   # nothing listens there
    monkeypatch.setattr(config, "DEFAULT_HOME", tmp_path)                       # no pid file there
    return tmp_path


def test_command_before_make_up_says_start_the_stack(no_stack, capsys):
    assert main(["collections", "list"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("seglake collections list: error: ") and "\n" not in err
    assert "is not running: start it with `make up` or `seglake stack up`" in err


def test_no_hint_when_the_stack_etcd_runs(no_stack, capsys):
    etcd = _stack_etcd(config.Settings.load())
    etcd.state_dir.mkdir(parents=True)
    etcd.pid_file.write_text(f"{os.getpid()}\n")      # a live pid: the stack says it is up
    assert main(["collections", "list"]) == 1
    err = capsys.readouterr().err
    assert "etcd connection failed" in err and "make up" not in err
