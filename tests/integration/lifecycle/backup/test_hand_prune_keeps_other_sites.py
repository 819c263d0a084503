"""A hand `seglake backup prune` judges only its own site's bundles (rows adversary s21:
it judged every bundle of the collection's name in the target, and two sites backing up
to one target lost each other's bundles). `--all-sites` judges them all."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))

from seglake import cli
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.storage.local import LocalStore

from copy_model_helpers import Writer, other_root, quiet


def _site(meta, store, settings, target, v: float, names) -> None:
    w = Writer(meta, store, settings)
    w.create("src", ["_default"])
    w.insert("src", range(10), v=v)
    w.flush("src")
    for n in names:
        snapshot.create(meta, store, "src", n)
        exports.export(meta, store, target, "src", n, **quiet)


def _committed(target) -> list[str]:
    return sorted(b for _, _, b, done in bundles.find(target, "default", "src") if done)


def test_a_hand_prune_leaves_another_sites_bundles(meta, store, settings, etcd_server, tmp_path, monkeypatch,
                                                   capsys):
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "s")
    target = LocalStore(tmp_path / "backup")
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)

    def prune(*extra) -> dict:
        capsys.readouterr()
        rc = cli.main(["backup", "prune", "src", "--keep-last", "1", "--target", target.uri, "--json", *extra])
        out, err = capsys.readouterr()
        assert rc == 0, err
        return json.loads(out)

    try:
        _site(meta, store, settings, target, 1.0, ["a1", "a2"])
        _site(meta2, store2, settings2, target, 2.0, ["b1", "b2"])      # newer: B's b2 is the newest of all
        r = prune()
        assert r["pruned"] == ["a1"], r                                 # A keeps its newest, a2
        assert _committed(target) == ["a2", "b1", "b2"]
        r = prune("--all-sites")
        assert r["pruned"] == ["a2", "b1"], r
        assert _committed(target) == ["b2"]
    finally:
        meta2.close()
