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

# run_dag NAME DAG_ID CONF: `airflow dags test` with its log in the Airflow home; stop on failure
run_dag() {
  local log="$AIRFLOW_HOME/demo-$1.log" state=success
  airflow dags test "$2" -c "$3" >"$log" 2>&1 || state=failed
  echo "$2 run: $state (full log: $log)"
  [ "$state" = success ] || { tail -40 "$log"; exit 1; }
}

# compare SRC DST: segments, rows and bytes of two collections side by side; stop if they differ
compare() {
  python - "$1" "$2" <<'PY'
import json, subprocess, sys
rows = json.loads(subprocess.run(["seglake", "collections", "list", "--json"], check=True,
                                 capture_output=True, text=True).stdout)
by = {r["name"]: r for r in rows}
names = sys.argv[1:3]
src, dst = by[names[0]], by[names[1]]
w = max(16, *(len(n) + 2 for n in names))
print(f"{'':10}{names[0]:>{w}}{names[1]:>{w}}")
for k in ("segments", "rows", "bytes"):
    print(f"{k:10}{src[k]:>{w}}{dst[k]:>{w}}{'' if src[k] == dst[k] else '   <-- differs'}")
assert all(src[k] == dst[k] for k in ("segments", "rows", "bytes")), "restored copy differs"
PY
}

echo "== 1. seed the demo collection (real Parquet binlogs, delta/stats logs, index files)"
seglake demo purge demo_restored >/dev/null
seglake snapshots drop demo demo_snap >/dev/null 2>&1 || true  # a reset is refused while a snapshot exists
seglake demo seed --name demo --partitions 2 --segments 4 --rows 2000 --dim 32 --reset
echo
seglake collections list
echo
echo "== 2. verify_collection through 'airflow dags test' (SparkSubmit, local mode)"
run_dag verify verify_collection '{"collection": "demo", "engine": "spark"}'
grep -E "segments, .* files" "$AIRFLOW_HOME/demo-verify.log" | tail -1 | sed -E 's/^.*(collection .demo)/\1/; s/ \[airflow.*$//' || true
echo
echo "== 3. snapshot_create through 'airflow dags test' (engine=spark: write_manifests on Spark)"
run_dag snapshot snapshot_create '{"collection": "demo", "name": "demo_snap", "description": "make demo", "engine": "spark"}'
seglake snapshots list --collection demo
echo
seglake snapshots describe demo demo_snap
echo
echo "== 4. snapshot_restore through 'airflow dags test' (copy-job TaskGroup, engine=spark, then verify)"
run_dag restore snapshot_restore '{"collection": "demo", "snapshot": "demo_snap", "target": "demo_restored", "engine": "spark"}'
seglake jobs list --collection demo_restored
echo
compare demo demo_restored
echo
echo "== 5. gc through 'airflow dags test' as a dry run (mark only), then its report"
run_dag gc gc '{"dry_run": true}'
seglake gc report
echo
echo "== 6. the write-ahead log: ingest into demo_wal (inserts, deletes, a committed and a rolled-back txn)"
python scripts/demo_wal.py ingest
seglake wal status
echo
echo "== 7. wal_flush through 'airflow dags test' (every pchannel, seal everything), then read the segments back"
run_dag wal_flush wal_flush '{"pchannel": "all", "flush_all": true, "engine": "inline"}'
python scripts/demo_wal.py check
python scripts/demo_wal.py sample
seglake segments list demo_wal
echo
echo "== 7b. snapshot the flushed collection, restore it (inline), compare, drop the snapshot"
run_dag wal_snapshot snapshot_create '{"collection": "demo_wal", "name": "demo_wal_snap", "engine": "inline"}'
run_dag wal_restore snapshot_restore '{"collection": "demo_wal", "snapshot": "demo_wal_snap", "target": "demo_wal_restored", "engine": "inline"}'
compare demo_wal demo_wal_restored
echo "== 7c. deletes and upserts through the WAL into the restored copy, flushed, applied where its rows are"
python scripts/demo_wal.py restored-write
run_dag wal_flush_restored wal_flush '{"pchannel": "all", "flush_all": true, "engine": "inline"}'
python scripts/demo_wal.py restored-check
run_dag wal_snapshot_drop snapshot_drop '{"collection": "demo_wal", "name": "demo_wal_snap"}'
echo
echo "== 7d. compaction through 'airflow dags test': a policy for demo_wal (scheduled; L0 delete logs folded at once),"
echo "       then a run without a collection (what every scheduled run is): the WAL's small segments and delete logs"
echo "       merged or folded, deleted rows dropped; the run's history"
seglake segments list demo_wal
run_dag compaction_policy compaction_policy '{"collection": "demo_wal", "scheduled": true, "protection_seconds": 0, "l0_age_seconds": 0}'
run_dag compaction compaction '{"engine": "inline"}'
grep -E "demo_wal: |compaction of " "$AIRFLOW_HOME/demo-compaction.log" | grep -v "^\s*$" | tail -3 | sed -E 's/ \[airflow.*$//' || true
seglake segments list demo_wal
seglake compaction history demo_wal
python scripts/demo_wal.py check
echo
echo "== 7e. point-in-time restore: demo_wal as it was just before its deletes (base snapshot or creation + its log replayed)"
seglake pitr show demo_wal
seglake restore demo_wal demo_wal_before_deletes --as-of "$(python scripts/demo_wal.py before-deletes)"
python scripts/demo_wal.py pitr-check
seglake wal status
echo
echo "== 8. drop_collection: begin (Dropping + DropCollection messages), wal_flush releases the vchannels, finish"
run_dag drop_begin drop_collection '{"collection": "demo_wal", "wait_for_flush": false}'
run_dag wal_flush_drop wal_flush '{"pchannel": "all", "engine": "inline"}'
run_dag drop_finish drop_collection '{"collection": "demo_wal"}'
grep -E "Dropped|dropped" "$AIRFLOW_HOME/demo-drop_finish.log" | grep -v "^\s*$" | tail -3 | sed -E 's/ \[airflow.*$//' || true
echo
echo "== 9. undrop: demo_wal (dropped inside its point-in-time window) back as demo_wal_back, as it was before the drop"
seglake collections undrop demo_wal --as demo_wal_back
python scripts/demo_wal.py undrop-check
echo
echo "== done. 'make up' then 'seglake collections describe demo' / 'seglake segments list demo' to inspect."
