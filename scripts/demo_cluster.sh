#!/usr/bin/env bash
# `make demo-cluster`: the whole demo on the scale-out profile (seglake.dev.cluster): a 3-member
# etcd cluster, SeaweedFS S3 and a Spark standalone master with 2 workers, all on loopback.
# The DAGs are unchanged: only the connection profile (.dev/cluster/env: AIRFLOW_CONN_* and
# SEGLAKE_*) differs from `make demo`. engine=spark for every DAG that has an engine; after
# each Spark step it prints where it ran (application ids, the workers of its executors).
# Starts the cluster when it is not up and stops it at the end; a cluster that was already
# up (make cluster-up) is left running, and the demo's collections are reset first.
set -euo pipefail
cd "$(dirname "$0")/.."
started=0
if ! seglake cluster status >/dev/null 2>&1; then
  echo "== 0. start the cluster (seglake cluster up)"
  seglake cluster up
  started=1
else
  seglake cluster status
fi
cleanup() { if [ "$started" = 1 ]; then echo; seglake cluster down; fi; }
trap cleanup EXIT
set -a
. "$(seglake cluster env)"   # the profile: no file is edited
set +a
export SEGLAKE_SPARK_LOG_LEVEL=ERROR
T0=$SECONDS
last_app=""

# run_dag NAME DAG_ID CONF: `airflow dags test` (log in the Airflow home); stop on failure;
# then the Spark applications it ran on the standalone master
run_dag() {
  local log="$AIRFLOW_HOME/demo-cluster-$1.log" state=success t=$SECONDS
  airflow dags test "$2" -c "$3" >"$log" 2>&1 || state=failed
  echo "$2 run: $state in $((SECONDS - t)) s (full log: $log)"
  [ "$state" = success ] || { tail -40 "$log"; exit 1; }
  where
}

where() {
  local out
  out=$(seglake cluster apps ${last_app:+--since "$last_app"})
  if [ "$out" != "(none)" ]; then
    echo "   ran on $SPARK_MASTER:"; sed 's/^/   /' <<<"$out"
    last_app=$(seglake cluster apps --json | python -c 'import json,sys; a=json.load(sys.stdin); print(a[-1]["id"] if a else "")')
  else
    echo "   (no Spark application: this step runs in the Airflow task)"
  fi
}

SPARK_MASTER=$(python -c 'import json,os; print("spark://127.0.0.1:%d" % json.loads(os.environ["AIRFLOW_CONN_SPARK_DEFAULT"])["port"])')
echo
echo "== where: etcd $SEGLAKE_ETCD_ENDPOINT (3 members), S3 $SEGLAKE_S3_ENDPOINT ($SEGLAKE_STORE_URI), Spark $SPARK_MASTER"
seglake config show | grep -E "^(etcd_endpoint|store_uri|s3_endpoint|s3_secret_key) " || true
last_app=$(seglake cluster apps --json | python -c 'import json,sys; a=json.load(sys.stdin); print(a[-1]["id"] if a else "")')

echo
echo "== 1. seed the demo collection into S3 (real Parquet binlogs, delta/stats logs, index files)"
seglake demo purge demo_restored >/dev/null
seglake snapshots drop demo demo_snap >/dev/null 2>&1 || true
seglake demo seed --name demo --partitions 2 --segments 4 --rows 2000 --dim 32 --reset
echo
echo "== 2. verify_collection (Spark: executors read every file from S3)"
run_dag verify verify_collection '{"collection": "demo"}'
echo
echo "== 3. snapshot_create, engine=spark (manifests written on the cluster)"
run_dag snapshot snapshot_create '{"collection": "demo", "name": "demo_snap", "description": "make demo-cluster", "engine": "spark"}'
seglake snapshots list --collection demo
echo
echo "== 4. snapshot_restore, engine=spark (copy job on the executors, then verify on Spark)"
run_dag restore snapshot_restore '{"collection": "demo", "snapshot": "demo_snap", "target": "demo_restored", "engine": "spark"}'
seglake jobs list --collection demo_restored
python - <<'PY'
import json, subprocess
rows = json.loads(subprocess.run(["seglake", "collections", "list", "--json"], check=True,
                                 capture_output=True, text=True).stdout)
by = {r["name"]: r for r in rows}
src, dst = by["demo"], by["demo_restored"]
print(f"{'':10}{'demo':>16}{'demo_restored':>16}")
for k in ("segments", "rows", "bytes"):
    print(f"{k:10}{src[k]:>16}{dst[k]:>16}{'' if src[k] == dst[k] else '   <-- differs'}")
assert all(src[k] == dst[k] for k in ("segments", "rows", "bytes")), "restored copy differs"
PY
echo
echo "== 5. gc as a dry run, engine=spark (mark only), then its report"
run_dag gc gc '{"dry_run": true, "engine": "spark"}'
seglake gc report
echo
echo "== 6. the write-ahead log: ingest into demo_wal (in S3), inserts, deletes, a committed and a rolled-back txn"
python scripts/demo_wal.py ingest
seglake wal status
echo
echo "== 7. wal_flush, engine=spark (every pchannel flushed on the executors), then read the segments back"
run_dag wal_flush wal_flush '{"pchannel": "all", "flush_all": true, "engine": "spark"}'
python scripts/demo_wal.py check
seglake segments list demo_wal
echo
echo "== 7b. snapshot the flushed collection and restore it (engine=spark), compare, drop the snapshot"
run_dag wal_snapshot snapshot_create '{"collection": "demo_wal", "name": "demo_wal_snap", "engine": "spark"}'
run_dag wal_restore snapshot_restore '{"collection": "demo_wal", "snapshot": "demo_wal_snap", "target": "demo_wal_restored", "engine": "spark"}'
python - <<'PY'
import json, subprocess
rows = json.loads(subprocess.run(["seglake", "collections", "list", "--json"], check=True,
                                 capture_output=True, text=True).stdout)
by = {r["name"]: r for r in rows}
src, dst = by["demo_wal"], by["demo_wal_restored"]
for k in ("segments", "rows", "bytes"):
    print(f"{k:10}{src[k]:>18}{dst[k]:>18}{'' if src[k] == dst[k] else '   <-- differs'}")
assert all(src[k] == dst[k] for k in ("segments", "rows", "bytes")), "restored copy differs"
PY
run_dag wal_snapshot_drop snapshot_drop '{"collection": "demo_wal", "name": "demo_wal_snap"}'
echo
echo "== 8. drop_collection: begin, wal_flush (engine=spark) releases the vchannels, finish"
run_dag drop_begin drop_collection '{"collection": "demo_wal", "wait_for_flush": false}'
run_dag wal_flush_drop wal_flush '{"pchannel": "all", "engine": "spark"}'
run_dag drop_finish drop_collection '{"collection": "demo_wal"}'
seglake collections list --all | grep -E "demo_wal |^id|^--" || true
echo
echo "== the cluster now"
seglake cluster status
echo
echo "== done in $((SECONDS - T0)) s: every Spark step above ran as an application of $SPARK_MASTER,"
echo "   metadata on the 3-member etcd cluster $SEGLAKE_ETCD_ENDPOINT, files in $SEGLAKE_STORE_URI at $SEGLAKE_S3_ENDPOINT"
