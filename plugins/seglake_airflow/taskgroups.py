"""Task factories shared by DAGs: the engine step every lifecycle has, and the task
groups a phase that chains reuses (instead of triggering another DAG, which never runs
under `airflow dags test`)."""

from __future__ import annotations

import re
from typing import Callable

from airflow.sdk import TaskGroup, task

from seglake_airflow.operators.spark import spark_submit_task


def safe_run_id(run_id: str) -> str:
    """An Airflow run id as a name in the store (report keys, GC run ids)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id).strip(".") or "run"


def _task_id(t) -> str:
    return getattr(t, "operator", t).task_id   # an XComArg (a @task call, mapped or not) or an operator


def engine_step(plan, inline, spark, *, skip_when: Callable[[dict], bool] | None = None, skip_to=None):
    """THE engine step of a lifecycle DAG: a `choose_engine` branch that reads the engine
    the plan task chose (`plan["engine"]`, from seglake.runners.choose) and runs either
    the `inline` task or the `spark` (SparkSubmit) task; with `skip_when(plan)` true it
    runs `skip_to` instead (nothing to do). Returns the branch; the caller wires what
    follows [inline, spark] (with a trigger rule that accepts the skipped one)."""
    targets = {"inline": _task_id(inline), "spark": _task_id(spark)}
    skip_id = None if skip_to is None else _task_id(skip_to)

    @task.branch(task_id="choose_engine")
    def choose_engine(planned: dict) -> str:
        if skip_when is not None and skip_when(planned):
            return skip_id
        return targets["spark" if planned["engine"] == "spark" else "inline"]

    branch = choose_engine(plan)
    branch >> [inline, spark] + ([] if skip_to is None else [skip_to])
    return branch


def verify_collection_group(collection: str, db: str = "default", group_id: str = "verify",
                            engine: str = "auto") -> TaskGroup:
    """resolve (and choose the engine) -> check_inline | check_files (Spark) -> summarize.
    `collection`, `db` and `engine` may be templates (an unset engine: auto, inline below
    inline_threshold_bytes of the collection's files). Both engines write the same report
    (seglake.lifecycle.verify); the group fails with a readable summary when any
    referenced file is missing, has the wrong size, or holds a different number of rows
    than its metadata says."""
    with TaskGroup(group_id=group_id, tooltip="verify every file of a collection") as group:

        @task(task_id="resolve")
        def resolve(collection: str, db: str, engine: str, run_id: str | None = None) -> dict:
            from seglake.lifecycle.copyjob import UNSET_ENGINE
            from seglake.meta.segments import FLUSHED
            from seglake.runners import choose
            from seglake.storage import layout
            from seglake_airflow.failfast import fail_fast
            from seglake_airflow.hooks.engine import SeglakeHook

            hook = SeglakeHook()
            with fail_fast():
                coll = hook.meta.catalog.get_by_name(collection, db)  # nothing written yet
                size = sum(x.total_size() for x in hook.meta.segments.list(coll.collection_id, states=[FLUSHED]))
                chosen = choose("verify", "auto" if engine in UNSET_ENGINE else engine, size, hook.settings)
            key = layout.report("verify", f"{coll.collection_id}/{safe_run_id(run_id or 'manual')}")
            print(f"verify {coll.name}: {size} bytes of files; engine {chosen}")
            return {"collection": coll.name, "collection_id": coll.collection_id, "db": db, "report_key": key,
                    "engine": chosen}

        resolved = resolve(collection, db, engine, run_id="{{ run_id }}")
        xcom = f"ti.xcom_pull(task_ids='{group_id}.resolve')"

        @task(task_id="check_inline")
        def check_inline(resolved: dict) -> None:
            """The same checks in this task (the job's thread pool): the report where
            the Spark job writes it."""
            import json

            from seglake.lifecycle.verify import verify_collection
            from seglake_airflow.hooks.engine import SeglakeHook

            hook = SeglakeHook()
            report = verify_collection(hook.meta, hook.store, resolved["collection"], resolved["db"],
                                       threads=hook.settings.copy_threads)
            hook.store.put(resolved["report_key"], json.dumps(report, indent=1).encode())

        inline = check_inline(resolved)
        check = spark_submit_task("check_files", "verify_collection", [
            "--collection", "{{ %s['collection'] }}" % xcom,
            "--db", "{{ %s['db'] }}" % xcom,
            "--report-key", "{{ %s['report_key'] }}" % xcom,
        ])

        @task(task_id="summarize", trigger_rule="none_failed_min_one_success")
        def summarize(resolved: dict) -> dict:
            import json

            from airflow.sdk.exceptions import AirflowFailException
            from seglake.lifecycle.verify import format_report
            from seglake_airflow.hooks.engine import SeglakeHook

            report = json.loads(SeglakeHook().store.get(resolved["report_key"]))
            text = format_report(report)
            print(text)
            if not report["ok"]:
                raise AirflowFailException("verification failed:\n" + text)
            return {k: report.get(k) for k in ("collection", "segments_checked", "files_checked", "rows",
                                                "visible_rows", "ok")}

        engine_step(resolved, inline, check)
        [inline, check] >> summarize(resolved)
    return group


def copy_job_group(job_id: str, engine: str = "auto", group_id: str = "copy_job",
                   deferrable: str | bool | None = "{{ params.deferrable }}") -> TaskGroup:
    """plan -> copy (inline | Spark) -> wait until every task is terminal -> finalize.
    `job_id`, `engine` and `deferrable` may be templates; an unset engine (None, "") means
    the engine the job was created with, an unset deferrable the worker's default at run time. Shared by snapshot_restore (a new job) and copy_segment_job
    (resume or re-drive an existing one). Every step is idempotent: a re-triggered run
    continues an Executing job and is a no-op for a finished one."""
    with TaskGroup(group_id=group_id, tooltip="run a copy-segment job") as group:

        @task(task_id="plan")
        def plan(job_id: str, engine: str) -> dict:
            from seglake.lifecycle import copyjob
            from seglake.runners import choose
            from seglake_airflow.failfast import fail_fast
            from seglake_airflow.hooks.engine import SeglakeHook

            hook = SeglakeHook()
            with fail_fast():
                wanted = copyjob.resume_engine(hook.meta, int(job_id), engine)
                job = copyjob.plan(hook.meta, int(job_id), hook.settings.max_segments_per_task)
            chosen = choose("copy", wanted, job.total_bytes, hook.settings)
            print(f"copy job {job.job_id}: {job.state}, {job.total_segments} segments, "
                  f"{job.total_bytes} bytes in {job.total_tasks} tasks; engine {chosen}")
            return {"job_id": job.job_id, "state": job.state, "engine": chosen,
                    "target_collection": job.target_collection, "db": job.db}

        @task(task_id="copy_inline")
        def copy_inline(planned: dict) -> dict:
            from seglake.lifecycle import copyjob
            from seglake_airflow.hooks.engine import SeglakeHook

            from seglake.progress import watch_copy_job

            hook, watcher = SeglakeHook(), SeglakeHook()
            threads = hook.settings.copy_threads
            try:
                with watch_copy_job(watcher.meta, planned["job_id"]):   # a progress line every 5 s
                    tasks = copyjob.run_inline(hook.meta, hook.store, planned["job_id"], threads=threads,
                                               settings=hook.settings)
            finally:
                watcher.close()
            return {"tasks_run": len(tasks), "failed": sum(t.state == "Failed" for t in tasks)}

        xcom = f"ti.xcom_pull(task_ids='{group_id}.plan')"
        copy_spark = spark_submit_task("copy_spark", "copy_segments", ["--job-id", "{{ %s['job_id'] }}" % xcom])

        from seglake_airflow.sensors.state import SeglakeStateSensor

        wait = SeglakeStateSensor(
            task_id="wait",
            kind="copy_job_done",
            check_kwargs={"job_id": "{{ %s['job_id'] }}" % xcom},
            poke_interval=5,
            timeout=24 * 3600,
            deferrable=deferrable,
            trigger_rule="none_failed_min_one_success",
        )

        @task(task_id="finalize")
        def finalize(planned: dict) -> dict:
            from seglake.lifecycle import copyjob
            from seglake_airflow.hooks.engine import SeglakeHook
            from airflow.sdk.exceptions import AirflowFailException

            hook = SeglakeHook()
            job = copyjob.finalize(hook.meta, planned["job_id"], settings=hook.settings)
            d = copyjob.describe_job(hook.meta, job.job_id)
            p = d["progress"]
            print(f"copy job {job.job_id}: {job.state}; {p['copied_segments']}/{p['total_segments']} segments, "
                  f"{p['copied_files']} files, {p['copied_bytes']} bytes, {job.total_rows} rows, "
                  f"{d['duration_s']} s" + (f"; reason: {job.reason}" if job.reason else ""))
            if job.state == "Failed":
                raise AirflowFailException(f"copy job {job.job_id} failed: {job.reason} "
                                           f"(target {job.target_collection!r} rolled back)")
            if job.state != "Completed":
                raise RuntimeError(f"copy job {job.job_id} is still {job.state}; retrying")
            return {"job_id": job.job_id, "state": job.state, "total_rows": job.total_rows,
                    "target_collection": job.target_collection}

        planned = plan(job_id, engine)
        inline = copy_inline(planned)
        # finished (or failed while Pending): nothing to copy, straight to the wait
        engine_step(planned, inline, copy_spark, skip_when=lambda p: p["state"] != "Executing", skip_to=wait)
        [inline, copy_spark] >> wait >> finalize(planned)
    return group


def replay_step(always: bool = False):
    """The `replay` task of a restore to a time (snapshot_restore, snapshot_restore_external
    with `as_of`; collection_undrop: `always`): the log -- this store's, or the WAL archive
    in the backup target -- replayed up to the instant into the target, which is usable
    only then (lifecycle/pitr). Without as_of (and not `always`) it does nothing."""
    @task(task_id="replay")
    def replay(params: dict) -> dict | None:
        if params.get("as_of") is None and not always:
            return None
        from seglake.lifecycle import pitr
        from seglake_airflow.hooks.engine import SeglakeHook

        from seglake.progress import watch_replay

        hook, watcher = SeglakeHook(), SeglakeHook()
        target = hook.meta.catalog.get_by_name(params["target"], params["db"])
        try:
            with watch_replay(watcher.meta, target.collection_id):   # a progress line every 5 s
                out = pitr.replay(hook.meta, hook.store, hook.settings, target.collection_id)
        finally:
            watcher.close()
        print(f"replayed {out['messages']} log messages ({out['log_bytes']} bytes) from "
              f"{out['snapshot'] or 'the collection creation'}: {out['rows_replayed']} rows, "
              f"{out['deletes_replayed']} deletes")
        return out
    return replay()
