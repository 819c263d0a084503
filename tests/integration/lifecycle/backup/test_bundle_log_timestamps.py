"""Issue 26 items 2 and 4, adversary rows4: the timestamps INSIDE a bundle's logs.

An import (and a restore from a bundle) range-checks every timestamp the bundle's
document holds against this store's clock and moves the TSO past the newest -- but the
row timestamps in a Timestamp log and the delete timestamps in a delta log were never
read: a bundle whose document is honest and whose logs (content and SHA-256 listed
consistently) hold timestamps far above it was imported, its rows then newer than
everything this store writes later: a delete acknowledged after the import did not hide
them, an upsert did not replace them (and a forged delete ts hid every later insert of
its pks). Every Timestamp log and delta log is checked to hold timestamps within its
log entry's [ts_from, ts_to] (the range the document lists, which is clock-checked),
before anything is written. Real etcd, real files on local disk."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seglake import manifest
from seglake.lifecycle import copyjob
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import bundle_restore
from seglake.lifecycle.backup import imports
from seglake.lifecycle.backup import verify as verifies
from seglake.meta.alloc import compose_ts
from seglake.storage import layout
from seglake.segfiles import TS_FIELD

from test_import_checks import _untouched, exported, other, quiet  # noqa: F401 (fixtures)

FUTURE = compose_ts(int(4.1e12))      # the year 2099, in TSO units


def _logs(doc, kind: str):
    """(segment entry, log entry) of every Timestamp log ('ts') or delta log ('delta')."""
    for e in doc["segments"]:
        if kind == "delta":
            yield from ((e, x) for x in e["deltalogs"])
        else:
            yield from ((e, x) for fl in e["binlogs"] if fl["field_id"] == TS_FIELD for x in fl["logs"])


def _forge_log(target, doc, kind: str, value: int) -> str:
    """One log's timestamps set to `value` (the middle row's only), the new content put
    in the target and listed consistently (size, SHA-256): only the content can tell."""
    e, x = next(_logs(doc, kind))
    old = doc["files"][x["path"]]
    t = pq.read_table(io.BytesIO(target.get(layout.bundle_blob(old["sha256"]))))
    col = "ts" if kind == "delta" else "Timestamp"
    ts = t.column(col).to_numpy().copy()
    ts[len(ts) // 2] = value
    t = t.set_column(t.column_names.index(col), col, pa.array(ts, t.schema.field(col).type))
    buf = io.BytesIO()
    pq.write_table(t, buf)
    raw = buf.getvalue()
    sha = manifest.sha256(raw)
    target.put(layout.bundle_blob(sha), raw)
    doc["files"][x["path"]] = {**old, "sha256": sha, "size": len(raw)}
    x["size"] = len(raw)
    # a consistent forgery: the stated totals follow the edited file (bundle.check_totals)
    doc["totals"]["bytes"] = sum(f["size"] for f in doc["files"].values())
    doc["totals"]["unique_blobs"] = len({f["sha256"] for f in doc["files"].values()})
    bundles.write(target, doc)
    return x["path"]


@pytest.mark.parametrize("kind,value", [("ts", FUTURE), ("delta", FUTURE), ("ts", 0)],
                         ids=["row_ts_in_the_future", "delete_ts_in_the_future", "row_ts_below_its_range"])
def test_a_log_with_timestamps_outside_its_listed_range_is_refused_before_any_write(exported, other, kind, value):
    target, doc = exported
    meta2, store2 = other
    if next(_logs(doc, kind), None) is None:
        pytest.skip(f"the demo bundle has no {kind} log")
    path = _forge_log(target, doc, kind, value)
    with pytest.raises(bundles.BundleError, match=f"{path.replace('/', '.')}.*timestamps {value}"):
        imports.import_bundle(meta2, store2, target, "bk", "s1", threads=1, **quiet)
    _untouched(meta2, store2)
    rep = verifies.verify(target, "bk", "s1", threads=1, **quiet)
    assert not rep["ok"] and any(f"timestamps {value}" in p["problem"] for p in rep["problems"]), rep
    # a restore from the bundle checks each log as it copies it: the job fails naming it
    out = bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "back", engine="inline", **quiet)
    copyjob.plan(meta2, out["job_id"])
    copyjob.run_inline(meta2, store2, out["job_id"])
    job = copyjob.finalize(meta2, out["job_id"])
    assert job.state != "Completed" and f"timestamps {value}" in (job.reason or ""), job
