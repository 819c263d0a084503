#!/usr/bin/env bash
# The main job on the embedded default: local directory store (.dev/store), the
# project's own etcd (.dev/etcd, port 23790), SQLite Airflow (.dev/airflow), Spark local.
# Re-runnable: the demo collection is rebuilt each time. Leaves nothing running unless
# the stack was already up (make up), in which case it is left as it was.
set -euo pipefail
cd "$(dirname "$0")/.."
started=0
if ! seglake stack status >/dev/null 2>&1; then
  seglake stack up >/dev/null
  started=1
fi
cleanup() { if [ "$started" = 1 ]; then seglake stack down >/dev/null; fi; }
trap cleanup EXIT

echo "== 1. seed the demo collection (real Parquet binlogs, delta/stats logs, index files)"
seglake demo seed --name demo --partitions 2 --segments 4 --rows 2000 --dim 32 --reset
echo
seglake collections list
echo
echo "== 2. verify_collection through 'airflow dags test' (SparkSubmit, local mode)"
log="$AIRFLOW_HOME/demo-verify.log"
if airflow dags test verify_collection -c '{"collection": "demo"}' >"$log" 2>&1; then
  state=success
else
  state=failed
fi
grep -E "segments, .* files" "$log" | tail -1 | sed -E 's/^.*(collection .demo)/\1/; s/ \[airflow.*$//' || true
echo "verify_collection run: $state (full log: $log)"
[ "$state" = success ] || { tail -40 "$log"; exit 1; }
echo
echo "== 3. snapshot_create through 'airflow dags test' (engine=spark: write_manifests on Spark)"
log="$AIRFLOW_HOME/demo-snapshot.log"
if airflow dags test snapshot_create -c '{"collection": "demo", "name": "demo_snap", "description": "make demo", "engine": "spark"}' >"$log" 2>&1; then
  state=success
else
  state=failed
fi
echo "snapshot_create run: $state (full log: $log)"
[ "$state" = success ] || { tail -40 "$log"; exit 1; }
seglake snapshots list --collection demo
echo
seglake snapshots describe demo demo_snap
echo
echo "== done. 'make up' then 'seglake collections describe demo' / 'seglake segments list demo' to inspect."
