"""Adversary s20: the fuzz of test_import_fuzz.py with other values (integral floats, the
edges of int64/uint64, empty and numeric strings). Issue 26 item 4, as a class: an import of a bundle whose document was edited (and its
commit marker recomputed to match, so only the content can tell) either refuses it with
one seglake error before the first etcd key or store file exists, or imports rows equal
to the source's. Every leaf of the document the import reads (source, snapshot, one
segment entry and its logs, one file record, totals) is set to each of a set of bad
values: negative, past int64, a fraction, a string, a path, null, a list, a map.

Real etcd, real files on local disk."""

from __future__ import annotations

import copy
import hashlib
import json
import uuid

import msgspec

import pytest

from seglake.config import Settings
from seglake.dev import demo
from seglake.errors import SeglakeError
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.meta import Meta
from seglake.storage import layout, open_store
from seglake.storage.local import LocalStore
from seglake.meta.copyjobs import JOB_COMPLETED
from bundle_restore_helpers import collection_rows as _rows, restore_bundle

quiet = dict(say=lambda line: None)
BAD = (1.0, 0.0, -0.0, 2**63 - 1, 2**63, 2**64 - 1, "", "0", 10**30)   # adversary s20: integral floats, int edges, empty


def _rows_or_error(meta, store, name: str):
    """The visible rows, or the error reading them raised (an unreadable result)."""
    try:
        return _rows(meta, store, name)
    except Exception as e:
        return f"unreadable: {type(e).__name__}: {str(e)[:160]}"


def _same(got, rows, path) -> bool:
    """The rows are the source's; after a partition renamed in the document (a consistent
    edit: the import cannot tell), the same rows under the new name."""
    if isinstance(got, list) and path[:3] == ("snapshot", "collection", "partitions") and path[-1] == "name":
        return [r[:4] for r in got] == [r[:4] for r in rows]
    return got == rows


def _leaves(node, path=()):
    """(path, value) of every scalar leaf under `node` (lists and maps recursed)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, path + (i,))
    else:
        yield path, node


def _set(doc, path, value):
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


def _targets(doc) -> list[tuple]:
    """The leaves attacked: source, snapshot, the first segment entry (every log in it),
    one file record, totals."""
    seg = doc["segments"][0]
    key = next(iter(doc["files"]))
    out = [p for p, _ in _leaves(doc["source"], ("source",))]
    out += [p for p, _ in _leaves(doc["snapshot"], ("snapshot",))]
    out += [p for p, _ in _leaves(seg, ("segments", 0))]
    out += [p for p, _ in _leaves(doc["files"][key], ("files", key))]
    out += [p for p, _ in _leaves(doc["totals"], ("totals",))]
    out += [("bundle",), ("uid",), ("version",), ("created_at",)]
    return out


@pytest.fixture(scope="module")
def source(etcd_server, tmp_path_factory):
    """A collection (2 partitions, deletes) exported as bundle s1: (target dir, document,
    visible rows)."""
    base = tmp_path_factory.mktemp("fuzz")
    s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": f"fz{uuid.uuid4().hex[:8]}",
                            "store_uri": str(base / "store"), "etcd_timeout": 5})
    meta, store = Meta.from_settings(s), open_store(s)
    demo.seed(meta, store, demo.SeedParams(name="bk", partitions=2, segments=2, rows=50, dim=2, delete_ratio=0.1))
    snapshot.create(meta, store, "bk", "s1")
    target = LocalStore(base / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    doc = bundles.read(target, "default", "bk", "s1")
    rows = _rows(meta, store, "bk")
    meta.close()
    return base / "backup", doc, rows


def _edited_targets(where, doc, tmp_path):
    """(path, value, target holding the data files and the edited bundle s1) per edit, the
    document says (its commit marker matches: only the content can tell)."""
    target = LocalStore(tmp_path / "target")
    for o in LocalStore(where).list("data/"):
        target.put(o.key, LocalStore(where).get(o.key))
    for path in _targets(doc):
        for value in BAD:
            edited = copy.deepcopy(doc)
            _set(edited, path, value)
            raw = msgspec.json.encode(edited, order="sorted")   # where bundle s1 of bk is, whatever it says
            target.put(layout.bundle_doc("default", "bk", "s1"), raw)
            target.put(layout.bundle_commit("default", "bk", "s1"), json.dumps(
                {"format": bundles.FORMAT, "version": bundles.VERSION, "sha256": hashlib.sha256(raw).hexdigest(),
                 "size": len(raw), "committed_at": 1.0}).encode())
            yield path, value, target


def _fresh(etcd_server, tmp_path):
    s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": f"in{uuid.uuid4().hex[:8]}",
                            "store_uri": str(tmp_path / f"s{uuid.uuid4().hex[:6]}"), "etcd_timeout": 5})
    return Meta.from_settings(s), open_store(s)


def test_an_edited_bundle_is_refused_before_the_import_writes_or_imports_the_same_rows(source, etcd_server, tmp_path):
    where, doc, rows = source
    problems, refused, imported, accepted = [], 0, 0, {}
    for path, value, target in _edited_targets(where, doc, tmp_path):
        meta2, store2 = _fresh(etcd_server, tmp_path)
        try:
            try:
                imports.import_bundle(meta2, store2, target, "bk", "s1", as_collection="back", **quiet)
            except SeglakeError:
                refused += 1
                if list(meta2.kv.range(meta2.keys.prefix, keys_only=True)) or list(store2.list("")):
                    problems.append(f"{path}={value!r}: refused after writing")
                continue
            except Exception as e:
                problems.append(f"{path}={value!r}: {type(e).__name__}: {str(e)[:200]}")
                continue
            imported += 1
            accepted.setdefault(path, []).append(value)
            out, job = restore_bundle(meta2, store2, target, "bk", "s1", "back2", completed=False)
            got = _rows_or_error(meta2, store2, "back2") if job.state == JOB_COMPLETED else None
            if not _same(got, rows, path):
                problems.append(f"{path}={value!r}: imported, then restored {job.state}: "
                                f"{got if isinstance(got, (str, type(None))) else len(got)} rows; source {len(rows)}")
        finally:
            meta2.close()
    for path, values in accepted.items():
        print("ACCEPTED", path, values)
    print(f"\nimport: {refused} refused, {imported} imported, {len(problems)} problems")
    assert refused and not problems, "\n".join(problems)


