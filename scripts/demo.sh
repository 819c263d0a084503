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
seglake demo purge demo_restored >/dev/null
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
echo "== 4. snapshot_restore through 'airflow dags test' (copy-job TaskGroup, engine=spark, then verify)"
log="$AIRFLOW_HOME/demo-restore.log"
if airflow dags test snapshot_restore -c '{"collection": "demo", "snapshot": "demo_snap", "target": "demo_restored", "engine": "spark"}' >"$log" 2>&1; then
  state=success
else
  state=failed
fi
echo "snapshot_restore run: $state (full log: $log)"
[ "$state" = success ] || { tail -40 "$log"; exit 1; }
seglake jobs list --collection demo_restored
echo
python - <<'PY'
import json, subprocess
rows = json.loads(subprocess.run(["seglake", "collections", "list", "--json"], check=True,
                                 capture_output=True, text=True).stdout)
by = {r["name"]: r for r in rows}
src, dst = by["demo"], by["demo_restored"]
print(f"{'':10}{'demo':>16}{'demo_restored':>16}")
for k in ("segments", "rows", "bytes"):
    print(f"{k:10}{src[k]:>16}{dst[k]:>16}{'' if src[k] == dst[k] else '   <-- differs'}")
PY
echo
echo "== 5. gc through 'airflow dags test' as a dry run (mark only), then its report"
log="$AIRFLOW_HOME/demo-gc.log"
if airflow dags test gc -c '{"dry_run": true}' >"$log" 2>&1; then state=success; else state=failed; fi
echo "gc dry run: $state (full log: $log)"
[ "$state" = success ] || { tail -40 "$log"; exit 1; }
seglake gc report
echo
echo "== done. 'make up' then 'seglake collections describe demo' / 'seglake segments list demo' to inspect."
