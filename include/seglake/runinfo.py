"""What a DAG run says about itself: the effective options it runs with (first lines of
a gc run) and the one-line summary set as the run's note when it ends. Pure functions
over plain dicts (a run's conf, its settings and their sources, task results), so the
Airflow glue only fetches and prints."""

from __future__ import annotations

import time
from typing import Any, Mapping

from seglake.progress import human_bytes, human_seconds


def _dur(seconds: float) -> str:
    return f"{seconds:g} s ({human_seconds(seconds)})"


def gc_options_lines(conf: Mapping[str, Any], raw_conf: Mapping[str, Any] | None, settings,
                     sources: Mapping[str, str], run_type: str | None = None,
                     record: Mapping[str, Any] | None = None) -> list[str]:
    """Every option a gc run uses and where it came from: `Param` (this run's conf),
    `Param default` (the form's default, a manual run only), `schedule record` (a
    scheduled run: what `seglake gc schedule set` recorded), or for tolerances not given,
    the settings layer (default, environment, Variable ...)."""
    raw = dict(raw_conf or {})
    scheduled = record is not None

    def param(key: str) -> str:
        if scheduled:
            return "schedule record"
        return "Param" if key in raw else "Param default"

    if scheduled:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record.get("set_at") or 0))
        origin = f"the settings `seglake gc schedule set` recorded at {when}" + (
            f" by {record['set_by']}" if record.get("set_by") else "")
    else:
        origin = "conf as given"
    lines = [f"gc options ({run_type or 'manual'} run; {origin}):"]
    dry = bool(conf.get("dry_run"))
    lines.append(f"  dry_run = {str(dry).lower():<28} [{param('dry_run')}]"
                 + ("" if dry else "  <- a REAL run: unreferenced files past the tolerances are deleted"))
    scope = f"collection {conf['db']}.{conf['collection']}" if conf.get("collection") else "whole store"
    lines.append(f"  scope = {scope:<30} [{param('collection')}]")
    for key in ("missing_tolerance", "drop_tolerance"):
        hours = conf.get(f"{key}_hours")
        if hours is not None:
            value, src = float(hours) * 3600, f"{param(key + '_hours')} {key}_hours"
        else:
            value, src = getattr(settings, key), f"config: {sources.get(key, 'default')}"
        lines.append(f"  {key} = {_dur(value):<22} [{src}]")
    lines.append(f"  tolerance_floor = {_dur(settings.tolerance_floor):<20} [config: "
                 f"{sources.get('tolerance_floor', 'default')}]")
    lines.append(f"  force = {str(bool(conf.get('force'))).lower():<30} [{param('force')}]")
    lines.append(f"  engine = {str(conf.get('engine')):<29} [{param('engine')}]")
    lines.append(f"  etcd = {settings.etcd_endpoint} root {settings.etcd_root!r} "
                 f"[{sources.get('etcd_endpoint', 'default')}]; store = {settings.store_uri} "
                 f"[{sources.get('store_uri', 'default')}]")
    return lines


# -- run notes ------------------------------------------------------------------------------
NOTE_MAX = 1000


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= NOTE_MAX else text[:NOTE_MAX - 3] + "..."


def restore_note(params: Mapping[str, Any], compared: Mapping[str, Any] | None, job: Mapping[str, Any] | None,
                 replay: Mapping[str, Any] | None = None) -> str:
    """`job`: copyjob.describe_job of the run's copy job (None if the restore never made one);
    `compared`: the compare task's result (None unless the run got that far); `replay`: a
    restore to a time's replay progress (lifecycle.pitr.progress) when it did not finish."""
    head = f"restore {params.get('collection')}/{params.get('snapshot')} -> {params.get('target')}"
    if not job:
        return _short(f"FAILED: {head}: no copy job was created (see the task logs)")
    p = job.get("progress") or {}
    facts = (f"{job.get('total_rows', 0)} rows, {p.get('copied_segments', 0)}/{p.get('total_segments', 0)} segments, "
             f"{human_bytes(p.get('copied_bytes', 0))} in {human_seconds(job.get('duration_s') or 0)} "
             f"(copy job {job.get('job_id')}, {job.get('engine')})")
    if job.get("state") == "Failed":
        return _short(f"FAILED: {head}: copy job {job.get('job_id')} Failed: {job.get('reason')}; {facts}")
    # a restore to a time's account (pitr.summary) is read from etcd whatever ran: its target
    # usable (Created) is what says the replay finished (the replay marked success by hand: Importing)
    unreplayed = (compared is not None and "as_of_utc" in compared and compared.get("state") != "Created")
    if (compared is None or unreplayed) and replay is not None and replay.get("state") != "Created":
        pct = f" ({replay['percent']:.1f}%)" if replay.get("percent") is not None else ""
        return _short(f"FAILED: {head}: copy job {job.get('state')} but the replay stopped at "
                      f"{human_bytes(replay.get('bytes', 0))} of {human_bytes(replay.get('bytes_total', 0))} of log"
                      f"{pct}, {replay.get('messages', 0)} messages, {replay.get('vchannels_done', 0)}/"
                      f"{replay.get('vchannels', 0)} vchannels done (a re-run resumes it); {facts}")
    if compared is None:
        return _short(f"FAILED: {head}: copy job {job.get('state')} but verify/compare did not pass; {facts}")
    if unreplayed:
        return _short(f"FAILED: {head}: copy job {job.get('state')} but the target is {compared.get('state')}, not "
                      f"Created: its replay did not finish (a re-run resumes it); {facts}")
    if job.get("state") != "Completed":   # a check passed on a partly copied target (copy steps marked)
        return _short(f"FAILED: {head}: copy job {job.get('job_id')} is {job.get('state')}, not Completed "
                      f"(its copy did not finish; resume it); {facts}")
    if "as_of_utc" in compared:   # a restore to a time (seglake.lifecycle.pitr.summary): what the replay used
        base = f"snapshot {compared['snapshot']}" if compared.get("snapshot") else "the collection's creation"
        if compared.get("archive"):
            base = f"bundle {compared['snapshot']} + the WAL archive in {compared['archive']}"
        what = (f"undrop {params.get('collection')} (as it was just before its drop, {compared['as_of_utc']})"
                if compared.get("undrop") else f"restore {params.get('collection')} as of {compared['as_of_utc']}")
        return _short(f"{what} -> {params.get('target')}: "
                      f"from {base}, {compared.get('messages', 0)} log messages "
                      f"({human_bytes(compared.get('log_bytes', 0))} of log) replayed: "
                      f"{compared.get('rows_replayed', 0)} rows, {compared.get('deletes_replayed', 0)} deletes; "
                      f"base copied: {facts}")
    return _short(f"{head}: {facts}")


def export_note(params: Mapping[str, Any], report: Mapping[str, Any] | None) -> str:
    head = f"export {params.get('collection')}/{params.get('snapshot')}"
    if not report:
        return _short(f"FAILED: {head}: no bundle was committed")
    name = f"bundle {report.get('bundle')}"
    if report.get("already"):
        return _short(f"{head}: {name} already in the backup target, nothing copied")
    kept = int(report.get("reused_files", 0)) + int(report.get("deduplicated_files", 0))
    return _short(f"{head}: {name} committed, {report.get('files')} files ({human_bytes(report.get('bytes', 0))}); "
                  f"{report.get('copied_files')} copied ({human_bytes(report.get('copied_bytes', 0))}), {kept} already "
                  f"in the target; {human_seconds(report.get('seconds') or 0)}")


def verify_bundle_note(params: Mapping[str, Any], report: Mapping[str, Any] | None) -> str:
    head = f"verify bundle {params.get('collection')}/{params.get('bundle')}"
    if not report:
        return _short(f"FAILED: {head}: not verified")
    return _short(f"{head}: OK, {report.get('data_files')} data files ({human_bytes(report.get('bytes', 0))}) read "
                  f"and checked in {human_seconds(report.get('seconds') or 0)}")


def compaction_note(params: Mapping[str, Any], done: Mapping[str, Any] | None) -> str:
    head = (f"compaction of {params.get('db', 'default')}.{params.get('collection')}" if params.get("collection")
            else f"scheduled compaction of {len((done or {}).get('collections') or ())} collection(s)")
    if not done:
        return _short(f"FAILED: {head}: no summary (see the task logs)")
    g, c = done.get("gain") or {}, done.get("counts") or {}
    # a collection skipped (Dropping, a restore importing into it) beside others that were compacted: both said
    skipped = f"; not compacted: {done['skipped']}" if done.get("skipped") else ""
    if skipped and not (c or (done.get("dry_run") and g.get("units"))):
        return _short(f"{head}: not compacted: {done['skipped']}")
    if not g.get("units") and not c.get("committed") and not c.get("lost"):   # (not '0 segments -> 0')
        return _short(f"{head}: nothing to compact" + (" (dry run)" if done.get("dry_run") else "") + skipped)
    if done.get("dry_run"):
        return _short(f"{head} (dry run): {g.get('units', 0)} units, {g.get('segments_in', 0)} segments -> "
                      f"{g.get('segments_out', 0)}, {g.get('rows_dropped', 0)} deleted rows to drop{skipped}")
    return _short(f"{head} ({done.get('engine')}): {c.get('committed', 0)} units committed, "
                  f"{c.get('lost', 0)} lost; {c.get('segments_in', 0)} segments -> {c.get('segments_out', 0)}, "
                  f"{c.get('rows_dropped', 0)} rows dropped, {human_bytes(c.get('bytes_in', 0))} -> "
                  f"{human_bytes(c.get('bytes_out', 0))} in {human_seconds(done.get('seconds') or 0)}{skipped}")


def gc_note(summary: Mapping[str, Any] | None, swept: Mapping[str, Any] | None = None,
            names: Mapping[int, str] | None = None, cleaned: bool = True) -> str:
    """`summary`: the summary task's XCom (its `swept`: whether the report was swept, by either
    engine); `swept`: the inline sweep's XCom; `cleaned`: whether the records step returned.
    A real run whose sweep or records step did not run (marked success, skipped by hand) did
    not do its work: FAILED, whatever the counts say."""
    if not summary:
        return "FAILED: gc did not finish, nothing was deleted unless the sweep ran (see the task logs)"
    if not summary.get("dry_run") and swept is None and summary.get("swept_partial"):
        return _short(f"FAILED: gc: the sweep stopped part-way: {summary.get('deleted', 0)} files "
                      f"({human_bytes(summary.get('deleted_bytes', 0))}) deleted of {summary.get('candidates', 0)} "
                      f"candidates; run gc again")
    if not summary.get("dry_run") and swept is None and not summary.get("swept", True):
        return _short(f"FAILED: gc: the sweep did not run, nothing was deleted of {summary.get('candidates', 0)} "
                      f"candidates ({human_bytes(summary.get('candidate_bytes', 0))}); run gc again")
    if not summary.get("dry_run") and not cleaned:
        return _short("FAILED: gc: the records step did not run (stale snapshot and segment records not "
                      "cleaned); " + gc_note(summary, swept, names))
    names = names or {}
    dry = bool(summary.get("dry_run"))
    per: dict[str, list[int]] = {}
    for key, v in (summary.get("by_collection_reason") or {}).items():
        coll, _, _ = str(key).partition("/")
        label = names.get(int(coll), f"#{coll}") if coll.isascii() and coll.isdigit() else (coll or "?")
        acc = per.setdefault(label, [0, 0])
        acc[0] += int(v.get("files", 0))
        acc[1] += int(v.get("bytes", 0))
    if dry:
        head = (f"gc DRY RUN (nothing deleted): a real run would delete {summary.get('candidates', 0)} files "
                f"({human_bytes(summary.get('candidate_bytes', 0))})")
    else:  # the summary carries the sweep's totals whichever engine swept (`swept`: the inline task's XCom)
        done = {k: (swept or {}).get(k, summary.get(k, 0)) for k in ("deleted", "deleted_bytes", "error_count")}
        head = (f"gc: deleted {done['deleted']} files ({human_bytes(done['deleted_bytes'])}) of "
                f"{summary.get('candidates', 0)} candidates"
                + (f", {done['error_count']} could not be deleted" if done["error_count"] else ""))
    verb = "would delete" if dry else "candidates"
    parts = [f"{name}: {verb} {files} files, {human_bytes(size)}" for name, (files, size) in sorted(per.items())]
    tail = f"; {summary['unrecognised']} unrecognised files kept" if summary.get("unrecognised") else ""
    return _short(head + (" -- " + "; ".join(parts) if parts else "") + tail)


def snapshot_note(params: Mapping[str, Any], report: Mapping[str, Any] | None) -> str:
    if not report:
        return _short(f"FAILED: snapshot {params.get('collection')}/{params.get('name')} was not committed "
                      "(see the task logs)")
    if report.get("state") != "COMMITTED":   # the write or the wait was marked instead of run
        return _short(f"FAILED: snapshot {report['collection']}/{report['name']} is {report.get('state')}, not "
                      f"COMMITTED (its manifests were not written by this run; run snapshot_create again)")
    return _short(f"snapshot {report['collection']}/{report['name']}: {report['state']}, {report['segments']} "
                  f"segments, {report['rows']} rows, {human_bytes(report['bytes'])}")


def wal_flush_note(summary: Mapping[str, Any] | None, pchannels: list | None = None) -> str:
    """`pchannels`: the listed pchannels; an empty list (no WAL yet) is a run with nothing to do."""
    if not summary and pchannels == []:
        return "wal_flush: no WAL pchannels, nothing to flush"
    if not summary:
        return "FAILED: wal_flush did not finish (see the task logs)"
    if int(summary.get("pchannels", 0)) < int(summary.get("expected", 0)):   # a flush marked instead of run
        return _short(f"FAILED: wal_flush flushed {summary.get('pchannels', 0)} of {summary['expected']} pchannels "
                      f"(the others' flush did not run; run wal_flush again): {summary.get('segments', 0)} segments, "
                      f"{summary.get('rows', 0)} rows")
    return _short(f"wal_flush: {summary.get('segments', 0)} segments flushed, {summary.get('rows', 0)} rows, "
                  f"{summary.get('delta_logs', 0)} delta logs, {human_bytes(summary.get('bytes', 0))} "
                  f"over {summary.get('pchannels', 0)} pchannels")


def drop_note(params: Mapping[str, Any], summary: Mapping[str, Any] | None) -> str:
    if not summary:
        return _short(f"FAILED: drop_collection {params.get('collection')} did not finish (see the task logs)")
    facts = (f"{summary['segments_dropped']} segments ({summary['rows_dropped']} rows, "
             f"{human_bytes(summary['bytes_awaiting_gc'])}) Dropped")
    if summary["state"] != "Dropped":
        # the wait or the finish was marked instead of run; without the wait, a Dropping collection
        # no vchannel holds back is one whose finish did not run (marked), not one left for wal_flush
        if params.get("wait_for_flush", True) or (summary["state"] == "Dropping" and summary.get("held") == 0):
            return _short(f"FAILED: drop_collection {summary['collection']} is still {summary['state']} "
                          f"(the drop did not finish; run drop_collection again): {facts}")
        return _short(f"drop_collection {summary['collection']}: {summary['state']} (wait_for_flush is false: "
                      f"a run after wal_flush releases its vchannels finishes the drop), {facts}")
    return _short(f"drop_collection {summary['collection']}: Dropped, {facts}, files wait for GC's drop_tolerance")


def schedule_note(policies: list | None, milvus: list | None, dry_run: bool = False) -> str:
    """snapshot_schedule's note: the seglake policies run and what they created, pruned and
    exported; the Milvus collections captured, pruned and verified (None: that task did
    not finish). A dry run says so and what it would have done (it changed nothing)."""
    if policies is None and milvus is None:
        return _short("FAILED: snapshot_schedule did not finish (see the task logs)")
    parts = ["retention policies: FAILED (see run_policies)" if policies is None
             else f"{len(policies)} retention policies run" + _policies_did(policies, dry_run)]
    if milvus is None:
        parts.append("Milvus sources: FAILED (see milvus_sources)")
    elif milvus:
        caught = [r for r in milvus if r.get("captured")]
        parts.append(f"Milvus: {len(caught)} of {len(milvus)} collections captured "
                     f"({sum(r['captured'].get('copied_bytes') or 0 for r in caught)} bytes copied), "
                     f"{sum(len(r.get('pruned') or []) for r in milvus)} bundles pruned, "
                     f"{sum(1 for r in milvus if (r.get('verify') or {}).get('ok'))} verified")
    # one half did not run (failed, or marked success instead of run): the run did not do its work
    return _short(("FAILED: " if policies is None or milvus is None else "") + "snapshot_schedule"
                  + (" DRY RUN (nothing created, pruned or exported)" if dry_run else "") + ": " + "; ".join(parts))


def _policies_did(policies: list, dry_run: bool) -> str:
    """': 2 snapshots created, 3 pruned, 1 bundle exported' (': would create ...' on a dry run)."""
    reports = [r for r in policies if isinstance(r, dict)]
    if not reports:
        return ""
    created = sum(1 for r in reports if r.get("created"))
    pruned = sum(len(r.get("pruned") or []) for r in reports)
    exports = [r["export"] for r in reports if isinstance(r.get("export"), dict)]
    exported = sum(len(e.get("exported") or []) for e in exports)
    pruned_there = sum(len(e.get("pruned") or []) for e in exports)
    if dry_run:
        said = f": would create {created} snapshots, would prune {pruned}"
        return said + (f", would export {exported} bundles and prune {pruned_there} in the target" if exports else "")
    said = f": {created} snapshots created, {pruned} pruned"
    return said + (f", {exported} bundles exported, {pruned_there} pruned in the target" if exports else "")


def result_note(kind: str, params: Mapping[str, Any], result: Any) -> str:
    """The note of a small lifecycle from its one result (None: it did not finish)."""
    what = {"snapshot_drop": f"snapshot {params.get('collection')}/{params.get('name')}",
            "snapshot_retention": f"retention policy of {params.get('collection')}",
            "snapshot_schedule": "snapshot_schedule", "verify_collection": f"verify {params.get('collection')}",
            "wal_archive": "wal_archive",
            "compaction_policy": f"compaction policy of {params.get('collection')}",
            "pitr_window": f"point-in-time window of {params.get('collection')}",
            "restore_database": f"restore of database {params.get('db')} as of {params.get('as_of')}",
            "milvus_backup": f"milvus capture {params.get('bundle')}",
            "milvus_restore": f"milvus restore {params.get('collection')}/{params.get('bundle')} -> "
                              f"{params.get('name')}"}[kind]
    if result is None:
        return _short(f"FAILED: {what} did not finish (see the task logs)")
    if kind == "snapshot_drop":
        if result.get("already"):   # a clear or retry of the run that dropped it
            return _short(f"{what} dropped (by this run's earlier try; nothing left to do)")
        return _short(f"{what} dropped, {result.get('files_removed', 0)} snapshot files removed")
    if kind in ("snapshot_retention", "compaction_policy"):
        return _short(f"{what} " + ("cleared" if "cleared" in result else "set"))
    if kind == "snapshot_schedule":
        return _short(f"snapshot_schedule: {len(result)} retention policies run")
    if kind == "pitr_window":
        return _short(f"{what} " + ("cleared" if "cleared" in result else f"set to {result.get('window')}"))
    if kind == "restore_database":
        return _short(f"{what}: {len(result)} collections, each at that instant: "
                      + "; ".join(f"{r['collection']} -> {r['target']} {r['rows']} rows ({r['state']})"
                                  for r in result))
    if kind == "wal_archive":
        behind = ", ".join(f"{p} up to {d['cursor']} of {d['last']}" for p, d in result["pchannels"].items())
        return _short(f"wal_archive: {result['fragments']} fragments ({human_bytes(result['bytes'])}) shipped to "
                      f"{result['target']}" + (f"; {behind}" if behind else "; no collection is archived"))
    if kind == "milvus_restore":
        return _short(f"{what}: {result.get('state')}, {result.get('segments')} segments imported, count(*) "
                      f"{result.get('count')} of {result.get('visible_rows')} visible rows, {result.get('sampled')} "
                      f"pks sampled, " + ("verified" if result.get("ok") else "NOT verified"))
    if kind == "milvus_backup":
        copied = ([r["copied_files"] for r in result], [r["copied_bytes"] for r in result])
        said = (f", {sum(copied[0])} files copied ({sum(copied[1])} bytes)"
                if all(x is not None for x in copied[0] + copied[1]) else "")
        return _short(f"{what}: {len(result)} collections captured, {sum(r.get('files', 0) for r in result)} files, "
                      f"{sum(r.get('rows', 0) for r in result)} rows{said}")
    return _short(f"{what}: OK, {result.get('files_checked')} files, {result.get('rows')} rows checked")
