"""A seglake export (a bundle without `kind`, docs/BUNDLE.md) restored into Milvus: its
collection as Milvus creates it, and each segment's plain Parquet files rewritten as Milvus
binlogs (seglake.milvus.binlog_writer) that Milvus's bulk insert in backup mode imports
like a capture's (seglake.milvus.restore stages and imports them the same way).

Supported field types (every type a seglake collection has): Bool, Int8, Int16, Int32,
Int64, Float, Double, VarChar (created with max_length 65535, Milvus's largest; a longer
value is refused) and FloatVector (dim kept). Any other type in a bundle is refused naming
the field; so is a null value (Milvus 2.3 has no nullable fields), naming the field and the
segment, and pk 2**63 - 1 or -2**63 (Milvus 2.3.5 holds the row, no query or delete by pk
reaches it) -- all before
anything is written on either side. Every file read after that is checked by SHA-256 again.

Visibility. seglake's deletes are collection-wide or scoped to a partition ("L0" style,
seglake.visibility); Milvus 2.3's bulk insert applies a segment's delta logs to that
segment's rows only, by pk. So each segment's deletes are rewritten as the deletes that hit
ITS rows: a hidden row is kept with a delete log entry (pk, ts of the newest delete that
hides it), unless a visible row of the same pk is in the same segment (an upsert within one
segment: a delete of that pk there would hide the new row too), in which case the hidden
row is left out. A 0-row segment (deletes only) has no rows to import: its deletes reach
Milvus through the segments whose rows they hide. Milvus's rows after the import are then
exactly seglake's visible rows (`visible` is what restore.verify compares them with).

Each converted segment's files are a pure function of the bundle's bytes (the same bytes on
a re-run), named insert_log/{c}/{p}/{s}/{field}/1 and delta_log/{c}/{p}/{s}/1 under the
segment's staging dir (ids: the bundle's).
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake import visibility
from seglake.errors import NotFound, SeglakeError
from seglake.lifecycle.backup import bundle as bundles
from seglake.manifest import entry_to_segment
from seglake.meta.catalog import Field, Schema
from seglake.milvus import binlog_writer
from seglake.segfiles import ROW_ID, ROW_ID_FIELD, TIMESTAMP, TS_FIELD
from seglake.storage import layout

MILVUS_TYPE = {"Bool": 1, "Int8": 2, "Int16": 3, "Int32": 4, "Int64": 5, "Float": 10, "Double": 11, "VarChar": 21,
               "FloatVector": 101}
VARCHAR_MAX = 65535
LOG_ID = 1
# pks Milvus 2.3.5 holds but cannot reach: 2**63 - 1 is counted by count(*) and returned by
# no query (pk == it, pk > 0, ...); -2**63 cannot be written in an expression (ParseInt of
# 9223372036854775808 fails), so no query or delete by pk names it
PK_UNQUERYABLE = (2**63 - 1, -2**63)


class ConvertError(SeglakeError):
    """A seglake bundle that cannot be restored into Milvus (a field type, a value)."""


class BundleFiles:
    """A bundle's segment files read by their own keys (as visibility reads a store),
    each served from its data file in the backup target."""

    def __init__(self, backup, doc: dict):
        self.backup, self.files = backup, doc["files"]

    def open_read(self, key: str):
        """The file's bytes, checked by SHA-256 and size as they are read (check() checked
        them before; a file damaged since -- a plan run later, as the DAG does -- is refused
        here, never converted)."""
        f = self.files.get(key)
        if f is None:
            raise NotFound(f"{key} is not a file of the bundle")
        raw = bundles.read_small(self.backup, layout.bundle_blob(f["sha256"]), f["size"])
        if len(raw) != f["size"] or hashlib.sha256(raw).hexdigest() != f["sha256"]:
            raise ConvertError(f"{key}: its data file in the backup target is damaged (not the SHA-256 or size the "
                               f"bundle records); nothing was converted from it")
        return io.BytesIO(raw)


def schema_of(doc: dict) -> Schema:
    """The bundle's seglake schema; ConvertError naming a field Milvus cannot take."""
    raw = doc["snapshot"]["collection"]["schema"]
    for f in raw:
        if f.get("dtype") not in MILVUS_TYPE:
            raise ConvertError(f"schema: field {f.get('name')!r} has type {f.get('dtype')!r}, which a restore into "
                               f"Milvus does not support (supported: {', '.join(MILVUS_TYPE)})")
    return Schema(tuple(Field(field_id=int(f["field_id"]), name=f["name"], dtype=f["dtype"],
                              is_primary=bool(f.get("is_primary")), dim=f.get("dim")) for f in raw))


def milvus_fields(schema: Schema) -> list[dict]:
    """The fields as a Milvus capture records them (what restore.check_schema and
    create_full take)."""
    out = []
    for f in schema.fields:
        params = {"dim": str(f.dim)} if f.dtype == "FloatVector" else \
                 {"max_length": str(VARCHAR_MAX)} if f.dtype == "VarChar" else {}
        out.append({"field_id": f.field_id, "name": f.name, "data_type": MILVUS_TYPE[f.dtype], "data_type_name": f.dtype,
                    "is_primary_key": f.is_primary, "auto_id": False, "description": "", "type_params": params,
                    "index_params": {}, "element_type": 0, "is_dynamic": False, "is_partition_key": False})
    return out


def as_milvus(doc: dict) -> dict:
    """The bundle as restore reads a capture: {"kind": None, "converted": True, "uid",
    "source", "files", "segments" (the live seglake entries), "snapshot": {"collection":
    schema in Milvus's form, partitions, shards; "indexes": [] (seglake records no Milvus
    index; restore builds a FLAT one to load)}, "seglake": the bundle's own document}."""
    schema = schema_of(doc)
    coll = doc["snapshot"]["collection"]
    return {"kind": None, "converted": True, "uid": doc["uid"], "source": doc["source"], "files": doc["files"],
            "segments": [e for e in doc["segments"] if e["state"] != "Dropped"],
            "snapshot": {"collection": {"collection_id": coll["collection_id"], "name": coll["name"],
                                        "shards": int(coll["shards"]), "consistency_level": 0,
                                        "partitions": coll["partitions"],
                                        "schema": {"name": coll["name"], "description": "", "auto_id": False,
                                                   "enable_dynamic_field": False, "fields": milvus_fields(schema)}},
                         "indexes": []},
            "seglake": doc}


def data_paths(doc: dict) -> list[str]:
    """The bundle files a conversion reads: every insert binlog and delta log of the live segments."""
    segs = [entry_to_segment(e) for e in doc["segments"]]
    out = [layout.insert_log(s.collection_id, s.partition_id, s.segment_id, f, b.log_id)
           for s in segs for f, logs in s.binlogs.items() for b in logs]
    out += [layout.delta_log(s.collection_id, s.partition_id, s.segment_id, b.log_id) for s in segs for b in s.deltalogs]
    return out


class Converter:
    """Reads the bundle's rows and deletes (once) and writes each segment as Milvus binlogs."""

    def __init__(self, backup, mdoc: dict):
        self.doc = mdoc
        self.view = BundleFiles(backup, mdoc)
        self.schema = schema_of(mdoc["seglake"])
        self.segments = {int(e["segment_id"]): entry_to_segment(e) for e in mdoc["segments"]}
        self.partitions = {int(p["partition_id"]): p["name"] for p in mdoc["snapshot"]["collection"]["partitions"]}
        self.user = [f for f in self.schema.fields if not f.is_primary]
        self._deletes = None

    def deletes(self):
        if self._deletes is None:
            self._deletes = visibility.read_deletes(self.view, self.segments.values(), self.partitions)
        return self._deletes

    def rows(self, sid: int) -> pa.Table:
        return visibility.read_rows(self.view, self.schema, [self.segments[sid]], [f.name for f in self.user])

    def check_values(self) -> None:
        """Every value Milvus can hold: no nulls, VarChar within max_length, no pk 2**63 - 1
        (before any write)."""
        for sid, seg in self.segments.items():
            if not seg.binlogs:
                continue
            t = self.rows(sid)
            if t.num_rows:
                ends = pc.min_max(t.column(visibility.PK)).as_py()
                bad = [pk for pk in PK_UNQUERYABLE if pk in (ends["min"], ends["max"])]
                if bad:
                    raise ConvertError(f"{self.schema.primary.name!r} {bad[0]} in segment {sid}: Milvus 2.3 holds such "
                                       f"a row but no query or delete by pk reaches it; nothing was written")
            for f in self.user:
                col = t.column(visibility.column_name(f))
                if col.null_count:
                    raise ConvertError(f"field {f.name!r} has {col.null_count} null value(s) in segment {sid}: Milvus "
                                       f"2.3 has no nullable fields; nothing was written")
                if f.dtype == "VarChar" and len(col) and pc.max(pc.binary_length(col)).as_py() > VARCHAR_MAX:
                    raise ConvertError(f"field {f.name!r} holds a value longer than {VARCHAR_MAX} bytes (Milvus's "
                                       f"max_length) in segment {sid}; nothing was written")

    def segment_files(self, sid: int) -> dict[str, bytes]:
        """{relative Milvus key: bytes} of segment `sid` (module doc: which rows, which deletes)."""
        seg = self.segments[sid]
        t = self.rows(sid)
        if not t.num_rows:
            return {}
        dels = self.deletes()
        visible = visibility.visible_mask(t, dels) if len(dels) else np.ones(t.num_rows, bool)
        pks = t.column(visibility.PK).to_numpy()
        keep = visible.copy()
        del_pk, del_ts = [], []
        hidden = np.flatnonzero(~visible)
        if len(hidden):
            seen = set(pks[visible].tolist())
            tss = t.column(TIMESTAMP).to_numpy()
            parts = t.column(visibility.PARTITION_ID).to_numpy()
            for i in hidden:
                pk = int(pks[i])
                if pk in seen:
                    continue             # an upsert in this segment: the old row is left out
                hit = (dels.pks == pk) & (dels.ts > tss[i]) & ((dels.partitions == 0) | (dels.partitions == parts[i])) \
                    & ((dels.segments == 0) | (dels.segments == sid))
                keep[i] = True
                del_pk.append(pk)
                del_ts.append(int(dels.ts[hit].max()))
        t = t.filter(pa.array(keep))
        c, p = seg.collection_id, seg.partition_id
        ts = t.column(TIMESTAMP)
        lo, hi = pc.min(ts).as_py(), pc.max(ts).as_py()
        out = {f"insert_log/{c}/{p}/{sid}/{ROW_ID_FIELD}/{LOG_ID}":
               binlog_writer.insert_log(c, p, sid, ROW_ID_FIELD, 5, t.column(ROW_ID), lo, hi),
               f"insert_log/{c}/{p}/{sid}/{TS_FIELD}/{LOG_ID}":
               binlog_writer.insert_log(c, p, sid, TS_FIELD, 5, ts, lo, hi)}
        for f in self.schema.fields:
            col = t.column(visibility.PK if f.is_primary else visibility.column_name(f))
            out[f"insert_log/{c}/{p}/{sid}/{f.field_id}/{LOG_ID}"] = \
                binlog_writer.insert_log(c, p, sid, f.field_id, MILVUS_TYPE[f.dtype], col, lo, hi, dim=f.dim)
        if del_pk:
            out[f"delta_log/{c}/{p}/{sid}/{LOG_ID}"] = binlog_writer.delete_log(c, p, sid, del_pk, del_ts)
        return out

    def visible(self) -> dict:
        """What verify compares Milvus with: {pk: [{field name: value}, ...]} of the bundle's
        visible rows (a pk inserted twice and never deleted has two), their count (duplicates
        counted, as Milvus's count(*) does), the count per partition name, and `hidden`: the
        pks every row of which a delete hides (Milvus must not return them)."""
        t = visibility.visible_rows_of(self.view, self.schema, self.segments.values(), self.partitions,
                                       columns=[f.name for f in self.user])
        names = [f.name for f in self.schema.fields]
        cols = {f.name: t.column(visibility.PK if f.is_primary else visibility.column_name(f)).to_pylist()
                for f in self.schema.fields}
        rows: dict = {}
        for i in range(t.num_rows):
            rows.setdefault(cols[self.schema.primary.name][i], []).append({n: cols[n][i] for n in names})
        per = {name: 0 for name in self.partitions.values()}
        for pid, n in zip(*np.unique(t.column(visibility.PARTITION_ID).to_numpy(), return_counts=True)):
            per[self.partitions[int(pid)]] += int(n)
        every = visibility.read_rows(self.view, self.schema, list(self.segments.values()), [])
        hidden = set(every.column(visibility.PK).to_pylist()) - set(rows)
        return {"rows": rows, "count": t.num_rows, "per_partition": per, "hidden": hidden}
