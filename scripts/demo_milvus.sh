#!/usr/bin/env bash
# seglake for a real Milvus (make demo-milvus): a Milvus 2.3.5 standalone (the PyPI wheel) on
# loopback against the stack's etcd and a SeaweedFS of its own; a collection with two
# partitions, deletes, upserts and an index written through pymilvus; captured by
# `seglake milvus backup` into a local backup target, verified, restored by
# `seglake milvus restore` into the same Milvus under a new name; the two collections'
# visible rows compared (count(*) and every pk). Re-runnable. Leaves nothing running that it
# started (the stack and Milvus are left as they were if they were already up).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
MPY=${MILVUS_VENV:-.dev/milvus-venv}/bin/python
TARGET="$PWD/.dev/milvus-demo-backups"
SRC=demo_mv
DST=demo_mv_restored

started=0
milvus_started=0
if ! seglake stack status >/dev/null 2>&1; then
  seglake stack up >/dev/null
  started=1
fi
cleanup() {
  if [ "$milvus_started" = 1 ]; then $PY -m seglake.dev.milvus down >/dev/null || true; fi
  if [ "$started" = 1 ]; then seglake stack down >/dev/null || true; fi
}
trap cleanup EXIT

echo "== 1. a Milvus standalone on loopback (its etcd root on the stack's etcd, its own SeaweedFS)"
if ! $PY -m seglake.dev.milvus status >/dev/null 2>&1; then
  milvus_started=1
  $PY -m seglake.dev.milvus up --timeout 240 | grep -E "^(milvus|address|etcd|etcd_root|s3_endpoint|bucket)"
else
  echo "already up"
fi
# where it is, and its bucket's keys in the environment (never on a command line)
eval "$($PY - <<'PY'
import shlex
from pathlib import Path
from seglake.config import DEFAULT_HOME, Settings
from seglake.dev.milvus import MilvusStack
stack = MilvusStack(Path(DEFAULT_HOME) / "milvus", Settings.load().etcd_endpoint)
weed, milvus = stack._servers()
for k, v in {"MV_ADDRESS": milvus.address, "MV_ETCD": milvus.etcd_endpoint, "MV_ROOT": milvus.etcd_root,
             "SEGLAKE_MILVUS_S3_ENDPOINT": weed.endpoint, "SEGLAKE_MILVUS_S3_ACCESS_KEY": weed.access_key,
             "SEGLAKE_MILVUS_S3_SECRET_KEY": weed.secret_key}.items():
    print(f"export {k}={shlex.quote(str(v))}")
PY
)"

# milvus OPS_JSON: ops through pymilvus (scripts/milvus_client.py, in the Milvus venv); JSON out
milvus() {
  printf '{"address": "%s", "ops": %s}' "$MV_ADDRESS" "$1" | $MPY scripts/milvus_client.py
}

echo
echo "== 2. write a collection through pymilvus: 2 partitions, 4,000 rows, deletes, upserts, an HNSW index"
milvus "[{\"op\": \"has\", \"name\": \"$SRC\"}, {\"op\": \"has\", \"name\": \"$DST\"}]" | $PY -c '
import json, subprocess, sys
has = json.load(sys.stdin)
names = [n for n, h in zip(sys.argv[1:], has) if h["exists"]]
if names:
    print("dropping the last run'"'"'s collections: " + ", ".join(names))
    ops = [{"op": "drop", "name": n} for n in names]
    subprocess.run([sys.argv[3], "scripts/milvus_client.py"], check=True, capture_output=True, text=True,
                   input=json.dumps({"address": sys.argv[4], "ops": ops}))
' "$SRC" "$DST" "$MPY" "$MV_ADDRESS"
milvus "[{\"op\": \"create\", \"name\": \"$SRC\", \"partitions\": [\"p1\", \"p2\"], \"shards\": 2, \"dim\": 8},
  {\"op\": \"insert\", \"name\": \"$SRC\", \"partition\": \"p1\", \"pks\": $($PY -c 'print(list(range(0, 2000)))')},
  {\"op\": \"insert\", \"name\": \"$SRC\", \"partition\": \"p2\", \"pks\": $($PY -c 'print(list(range(2000, 4000)))')},
  {\"op\": \"flush\", \"name\": \"$SRC\"},
  {\"op\": \"delete\", \"name\": \"$SRC\", \"pks\": $($PY -c 'print(list(range(0, 100)) + list(range(2000, 2050)))')},
  {\"op\": \"upsert\", \"name\": \"$SRC\", \"partition\": \"p1\", \"pks\": $($PY -c 'print(list(range(500, 540)))')},
  {\"op\": \"flush\", \"name\": \"$SRC\"},
  {\"op\": \"index\", \"name\": \"$SRC\", \"type\": \"HNSW\", \"params\": {\"M\": 8, \"efConstruction\": 64}}]" >/dev/null
echo "written and flushed: $SRC"

echo
echo "== 3. seglake milvus backup: Milvus's etcd and bucket read (never written) into a bundle"
BUNDLE="demo_$(date -u +%Y%m%dT%H%M%S)"
seglake milvus backup --milvus-etcd "$MV_ETCD" --milvus-root "$MV_ROOT" --bucket milvus --bucket-root files \
  --bundle "$BUNDLE" --target "$TARGET" "$SRC"
seglake backup verify "$SRC" "$BUNDLE" --target "$TARGET"

echo
echo "== 4. seglake milvus restore: the bundle into the same Milvus as $DST (bulk insert, index, load, verify)"
seglake milvus restore "$SRC" "$BUNDLE" "$DST" --address "$MV_ADDRESS" --bucket milvus --target "$TARGET"

echo
echo "== 5. the two collections' visible rows, as Milvus answers (count(*), every pk, the values of 300 rows)"
SAMPLE="pk in [$($PY -c 'print(", ".join(str(p) for p in list(range(90, 190)) + list(range(480, 580)) + list(range(2000, 2100))))')]"
milvus "[{\"op\": \"count\", \"name\": \"$SRC\"}, {\"op\": \"pks\", \"name\": \"$SRC\"},
         {\"op\": \"query\", \"name\": \"$SRC\", \"expr\": \"$SAMPLE\", \"output_fields\": [\"pk\", \"v\", \"vec\"]},
         {\"op\": \"count\", \"name\": \"$DST\"}, {\"op\": \"pks\", \"name\": \"$DST\"},
         {\"op\": \"query\", \"name\": \"$DST\", \"expr\": \"$SAMPLE\", \"output_fields\": [\"pk\", \"v\", \"vec\"]}]" \
  | $PY -c '
import json, sys
c1, p1, q1, c2, p2, q2 = json.load(sys.stdin)
src, dst = sys.argv[1:3]
rows = lambda q: sorted((r["pk"], r["v"], tuple(r["vec"])) for r in q)
print("%-12s%18s%18s" % ("", src, dst))
print("%-12s%18d%18d" % ("count(*)", c1["count"], c2["count"]))
print("%-12s%18d%18d" % ("pks", len(p1["pks"]), len(p2["pks"])))
print("%-12s%18d%18d   (values of pk 90..189, 480..579, 2000..2099 compared)" % ("sampled", len(q1), len(q2)))
expected = 4000 - 150     # 150 deleted; the 40 upserts replace their rows
assert c1["count"] == c2["count"] == expected, (c1, c2, expected)
assert p1["pks"] == p2["pks"], "the restored collection has other pks"
assert rows(q1) == rows(q2) and len(q1) == 300 - 10 - 50, "the restored rows have other values"
assert all(r["v"] >= 1000 for r in q1 if 500 <= r["pk"] < 540), "the upserts are not the visible rows"
print("rows equal: the restored collection answers as the captured one")
' "$SRC" "$DST"
