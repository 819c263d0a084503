"""What the e2e modules that use the seglake page share: a seeded collection in the
standalone's etcd root and store (removed again at the end), and a logged-in browser."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def seeded(sa, etcd_server, name: str, segments: int, rows: int, snapshot: str | None = "s1"):
    """(meta, store, collection): a demo collection `name` in the standalone's etcd root
    and store (one partition, dim 4), with a snapshot; every etcd key and store file
    created meanwhile is removed at the end (the later modules share the standalone)."""
    from seglake.config import Settings
    from seglake.dev import demo
    from seglake.lifecycle import snapshot as snapshots
    from seglake.meta import Meta
    from seglake.storage import open_store

    s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": sa.root,
                            "store_uri": sa.store_uri, "etcd_timeout": 5})
    meta, store = Meta.from_settings(s), open_store(s)
    keys_before = {kv.key for kv in meta.kv.range(meta.keys.prefix, keys_only=True)}
    files_before = {o.key for o in store.list("")}
    coll, _ = demo.seed(meta, store, demo.SeedParams(name=name, partitions=1, segments=segments, rows=rows, dim=4))
    if snapshot:
        snapshots.create(meta, store, name, snapshot)
    try:
        yield meta, store, coll
    finally:
        assert not store.delete_many([o.key for o in store.list("") if o.key not in files_before])
        for kv in meta.kv.range(meta.keys.prefix, keys_only=True):
            if kv.key not in keys_before:
                meta.kv.delete(kv.key)
        meta.close()


@contextmanager
def logged_in(sa, token: str | None = None, offline: bool = False):
    """Headless Chromium with a session of `token` (the admin's by default), as after a login."""
    from cdp import Browser

    with Browser(timeout=60, offline=offline) as b:
        b.send("Network.enable")
        b.set_cookie(sa.base + "/", "_token", token or sa.token)
        yield b


def open_trigger_form(b, sa, dag_id: str) -> None:
    """Airflow's trigger form of the DAG, opened from its page as a user does."""
    b.open(f"{sa.base}/dags/{dag_id}")
    b.click('[data-testid="trigger-dag-button"]')
    b.wait("!!document.querySelector('[data-testid=\"trigger-dag-submit\"]')", what="the trigger form")
    b.wait("document.querySelectorAll('[id^=\"element_\"]').length > 0", what="the form's fields")


def dialog_text(b) -> str:
    """The trigger form's text (the dialog that holds the submit button)."""
    return b.js("(document.querySelector('[data-testid=\"trigger-dag-submit\"]')?.closest('[role=\"dialog\"]')"
                " || document.body).innerText") or ""
