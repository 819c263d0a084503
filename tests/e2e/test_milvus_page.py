"""Issue 29 Deliver 4 in a browser: the seglake page in `airflow standalone`, opened by
headless Chromium, lists a registered Milvus source, its captures (rows, size, last
verification, pin) and a restore into Milvus, from what seglake's etcd records (written
here by the engine's own calls, in the standalone's etcd root); the REST list answers the
same. The captures themselves against a real Milvus: tests/milvus/test_milvus_schedule.py.
Everything written is removed at the end (the later modules share the standalone)."""

from __future__ import annotations

import json
import time

import pytest
from pages import logged_in

pytestmark = [pytest.mark.airflow]


@pytest.fixture(scope="module")
def records(standalone, etcd_server, tmp_path_factory):
    from seglake.config import Settings
    from seglake.lifecycle.backup import verify
    from seglake.meta import Meta
    from seglake.milvus import capture, sources

    s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": standalone.root,
                            "store_uri": standalone.store_uri, "etcd_timeout": 5})
    meta = Meta.from_settings(s)
    before = {kv.key for kv in meta.kv.range(meta.keys.prefix, keys_only=True)}
    now = time.time()
    sources.set_source(meta, "prod_e2e", {"milvus_etcd": "milvus-etcd:2379", "bucket": "milvus-bucket",
                                          "collections": "docs_e2e", "keep_last": 3})
    capture.record(meta, {"bundle": "sched_20261127T1200Z", "db": "default", "collection": "docs_e2e",
                          "created_at": now - 60, "finished_at": now - 50, "rows": 4321, "bytes": 2 << 20,
                          "files": 15, "segments": 2, "copied_files": 15, "copied_bytes": 2 << 20,
                          "target": "/backup", "milvus_version": "v2.3.5", "etcd_revision": 9},
                   {"etcd_root": "by-dev", "bucket": "milvus-bucket", "root_path": "files"})
    verify.record(meta, {"db": "default", "collection": "docs_e2e", "bundle": "sched_20261127T1200Z", "ok": True,
                         "checked_at": now - 40, "problems": [], "problem_count": 0})
    from seglake.storage import layout
    from seglake.storage.local import LocalStore

    target = LocalStore(tmp_path_factory.mktemp("backup"))   # a pin names a committed bundle of the target
    target.put(layout.bundle_commit("default", "docs_e2e", "sched_20261127T1200Z"), b"{}")
    sources.pin(meta, target, "default", "docs_e2e", "sched_20261127T1200Z", 7200, by="ops")
    meta.kv.put(meta.keys.milvus_restore("e" * 24), json.dumps(
        {"v": 1, "state": "verified", "bundle": "default.docs_e2e/sched_20261127T1200Z", "name": "docs_e2e_back",
         "target": {"address": "milvus:19530"}, "created_at": now - 30, "verified_at": now - 10,
         "report": {"ok": True, "count": 4321, "visible_rows": 4321}}))
    yield
    for kv in meta.kv.range(meta.keys.prefix, keys_only=True):
        if kv.key not in before:
            meta.kv.delete(kv.key)
    meta.close()


def test_the_page_lists_milvus_sources_captures_and_restores(standalone, records):
    r = standalone.request("GET", "/seglake/api/v1/milvus")
    assert r.status_code == 200, r.text
    body = r.json()
    assert [s["name"] for s in body["sources"]] == ["prod_e2e"]
    assert [(c["bundle"], c["rows"], c["verified_ok"]) for c in body["captures"]] == \
        [("sched_20261127T1200Z", 4321, True)]
    with logged_in(standalone) as b:
        b.open(f"{standalone.base}/seglake/")
        sec = "(document.querySelector('#milvus') || {innerText: ''}).innerText"
        b.wait(f"{sec}.includes('sched_20261127T1200Z')", what="the Milvus section with the capture")
        text = b.js(sec)
    for words in ("prod_e2e", "docs_e2e", "last 3", "4,321", "2.0 MiB", "OK", "docs_e2e_back", "milvus:19530",
                  "4,321 of 4321", "verified"):
        assert words in text, (words, text)
