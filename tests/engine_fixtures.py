"""One factory for the engine fixtures of every layer: a Meta and a Store opened from a
settings fixture, the Meta closed after the test.

    meta, store = engine_fixtures("settings", "meta", "store")         # tests/conftest.py
    cmeta, cstore = engine_fixtures("csettings", "cmeta", "cstore")    # tests/cluster/conftest.py
    fmeta, fstore = engine_fixtures("fsettings", "fmeta", "fstore")    # tests/faults/fault_harness.py
"""

from __future__ import annotations

import pytest


def engine_fixtures(settings: str, meta: str, store: str):
    """Function-scoped fixtures `meta` and `store` over the fixture named `settings`."""

    def meta_fixture(request):
        from seglake.meta import Meta

        m = Meta.from_settings(request.getfixturevalue(settings))
        yield m
        m.close()

    def store_fixture(request):
        from seglake.storage import open_store

        return open_store(request.getfixturevalue(settings))

    meta_fixture.__doc__ = f"A Meta on `{settings}`, closed after the test."
    store_fixture.__doc__ = f"The store of `{settings}`."
    return pytest.fixture(meta_fixture, name=meta), pytest.fixture(store_fixture, name=store)
