"""Server-side HTML of the seglake page: one self-contained document (inline CSS, SVG and
the one script of its actions, ui/actions.py; no external asset), every value escaped.
Input: `seglake.console.overview()`."""

from __future__ import annotations

import time
from html import escape
from urllib.parse import quote

from seglake_airflow.ui import actions
from seglake_airflow.ui.actions import SCRIPT, form

REFRESH_S = 10
BUSY_REFRESH_S = 2     # while a copy job or an export runs


def busy(data: dict) -> bool:
    """Something runs: a copy job not finished, an export in progress, or a replay moving."""
    jobs = (data.get("jobs") or {}).get("rows") or []
    exports = (((data.get("backup") or {}).get("rows")) or {}).get("exports") or []
    replays = (((data.get("backup") or {}).get("rows")) or {}).get("replays") or []
    return (any(not j.get("terminal", True) for j in jobs)
            or any(e.get("state") == "running" and e.get("health", "running") == "running" for e in exports)
            or any(r.get("health") == "replaying" for r in replays))   # a stalled one does not keep the fast refresh
CSS = """
body{font-family:system-ui,sans-serif;margin:16px;color:#1f2933;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:22px 0 6px;border-bottom:1px solid #d9e2ec}
table{border-collapse:collapse;font-size:13px;width:100%} th,td{padding:4px 8px;text-align:left;
border-bottom:1px solid #eef2f6;vertical-align:top;overflow-wrap:anywhere} th{background:#f5f7fa;font-weight:600}
body,h2,#action-result{overflow-wrap:anywhere} th,td.n,.st,button{white-space:nowrap;overflow-wrap:normal}
td.n{text-align:right;font-variant-numeric:tabular-nums} .muted{color:#7b8794;font-size:12px}
.st{display:inline-block;padding:1px 6px;border-radius:8px;font-size:12px;background:#e4e7eb}
.st.ok{background:#c6f7e2}.st.run{background:#bae3ff}.st.bad{background:#ffd0d0}.st.warn{background:#fff3c4}
.bar{background:#e4e7eb;height:8px;width:160px;border-radius:4px;overflow:hidden;margin:2px 0}
.bar>i{display:block;height:100%;background:#2680c2}.err{color:#ab091e}
.runid{font-family:ui-monospace,monospace;font-size:12px;font-weight:normal}
form.act{display:inline-flex;gap:4px;margin:0 6px 2px 0} form.act input{font-size:12px;padding:1px 4px}
form.act button{font-size:12px;padding:1px 6px;cursor:pointer}
#read-only,#paused-schedules{color:#8d5b00} #action-result{min-height:18px;margin:6px 0} #action-result.ok{color:#0c6b58} #action-result.warn{color:#8d5b00}
#action-result form.act{display:inline}
"""
OK = {"Created", "COMMITTED", "Completed", "Flushed", "committed", "OK", "verified"}
RUN = {"Executing", "InProgress", "PENDING", "Pending", "Importing", "running"}
BAD = {"Failed", "Dropped", "Dropping", "DELETING", "failed", "BAD", "stopped"}


def human_bytes(n: float | None) -> str:
    """seglake.progress.human_bytes, '-' for none."""
    from seglake.progress import human_bytes as fmt

    return "-" if n is None else fmt(n)


def human_duration(s: float | None) -> str:
    if s is None:
        return "-"
    s = int(max(0, s))
    d, h, m = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m}m"
    return f"{m}m {s % 60}s" if m else f"{s}s"


def _state(s: str) -> str:
    cls = "ok" if s in OK else "run" if s in RUN else "bad" if s in BAD else ""
    return f'<span class="st {cls}">{escape(s)}</span>'


def _bar(fraction: float, label: str) -> str:
    pct = max(0.0, min(1.0, fraction)) * 100
    return f'<div class="bar" title="{escape(label)}"><i style="width:{pct:.1f}%"></i></div>' \
           f'<span class="muted">{escape(label)}</span>'


def _table(headers: list[str], rows: list[list[str]], numeric: set[int] = frozenset(), empty: str = "none") -> str:
    if not rows:
        return f'<p class="muted">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _section(title: str, sec: dict, body) -> str:
    html = f'<section id="{escape(title.lower().replace(" ", "-"))}"><h2>{escape(title)}</h2>'
    if sec.get("error"):
        html += f'<p class="err">could not read: {escape(sec["error"])}</p>'
    else:
        html += body(sec["rows"])
    return html + "</section>"


PIN_MIN_HOURS = "0.0003"   # the pin box's minimum: 1 s (limits "pin_ttl") rounded up; 0 is refused by the browser


def run_link(dag_id: str, run_id: str) -> str:
    """The Airflow page of one DAG run (relative: works under a base path). Inside
    Airflow's iframe the page's script hands it to Airflow's router (ui/actions.py), so
    it opens in Airflow's view, not nested in the frame."""
    return f"../dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def utc(seconds: float | None) -> str:
    if not seconds:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(seconds)))


def _tick(tick: int | None) -> str:
    from seglake.progress import tick_time
    return tick_time(tick)


def _collections(rows: list[dict]) -> str:
    def actions(r: dict) -> str:
        if r["state"] != "Created":
            return ""
        return form(f"snapshot {r['name']}", "POST", "snapshots", fields=(("name", "snapshot name", "name"),),
                    body={"collection": r["name"], "db": r["db"]}, button="snapshot")
    return _table(
        ["collection", "db", "state", "segments", "rows", "bytes", "files", "partitions", "channels", ""],
        [[escape(r["name"]), escape(r["db"]), _state(r["state"]), str(r["segments"]), f"{r['rows']:,}",
          human_bytes(r["bytes"]), str(r["files"]), str(r["partitions"]),
          '<span class="muted">' + escape(", ".join(r["channels"])) + "</span>", actions(r)] for r in rows],
        numeric={3, 4, 5, 6, 7}, empty="no collections")


def _snapshots(rows: list[dict]) -> str:
    out = []
    for r in rows:
        ttl = "never" if r["expires_at"] is None else (
            "expired" if (r["ttl_left_s"] or 0) <= 0 else human_duration(r["ttl_left_s"]))
        action = ""
        if r["state"] == "COMMITTED":
            base = f"snapshots/{quote(r['collection'], safe='')}/{quote(r['name'], safe='')}"
            where = f"{r['collection']}/{r['name']}"
            action = (form(f"restore {where}", "POST", f"{base}/restore", fields=(("target", "new collection", "name"),),
                           body={"db": r["db"]}, button="restore")
                      + form(f"pin {where}", "POST", f"{base}/pins",
                             fields=(("ttl_hours", "hours (> 0, at most 8760)", f"number:24:{PIN_MIN_HOURS}"),),
                             body={"db": r["db"]}, button="pin (h)")
                      + form(f"drop {where}", "DELETE", f"{base}?db={quote(r['db'], safe='')}",
                             confirm="click again to drop", button="drop"))
        state = _state(r["state"])
        if r.get("gave_up"):
            state += ' <span class="st bad">its create gave up</span>'
        elif r.get("stalled_s") is not None:   # no writer beats: its run stopped (GC removes it later)
            state += (f' <span class="st warn stalled">no writer for {escape(human_duration(r["stalled_s"]))}: '
                      f'its create run stopped?</span>')
        out.append([escape(r["collection"]), escape(r["name"]), state, human_duration(r["age_s"]),
                    ttl, escape(", ".join(map(str, r["pins"])) or "-"), str(r["segments"]), f"{r['rows']:,}",
                    human_bytes(r["bytes"]), escape(r["error"] or r["description"] or ""), action])
    return _table(["collection", "snapshot", "state", "age", "TTL left", "pins", "segments", "rows", "size",
                   "note", ""], out, numeric={6, 7, 8}, empty="no snapshots")


def _jobs(rows: list[dict]) -> str:
    out = []
    for j in rows:
        p, f = j["progress"], j["fractions"]
        bars = (_bar(f["segments"], f"segments {p['copied_segments']}/{p['total_segments']}")
                + _bar(f["files"], f"files {p['done_files']}/{p['total_files']}")
                + _bar(f["bytes"], f"{human_bytes(p['done_bytes'])} / {human_bytes(p['total_bytes'])}"))
        rate = f"{human_bytes(j['rate_bps'])}/s" if j["rate_bps"] else "-"
        eta = human_duration(j["eta_s"]) if j["eta_s"] is not None else "-"
        state = _state(j["state"])
        if j.get("stalled_s") is not None:   # bytes have not moved: said, not hidden behind a growing ETA
            state += f' <span class="st warn stalled">stalled for {escape(human_duration(j["stalled_s"]))}</span>'
            eta = "-"
        elif j.get("paced_until"):   # its runner waits its turn under the job's rate limit: not a stall
            state += (f' <span class="muted paced">paced by its rate limit: next copy in '
                      f'{escape(human_duration(j["paced_until"] - time.time()))}</span>')
        origin = j.get("origin") or {}
        job = str(j["job_id"])
        if origin.get("dag_id") and origin.get("run_id"):   # the DAG run that made it: its tasks and their logs
            job = (f'<a href="{escape(run_link(origin["dag_id"], origin["run_id"]))}" '
                   f'title="the DAG run (tasks and logs)">{job}</a>')
        if j.get("health") == "stalled":   # a healthy running job is not offered a second runner
            job += " " + form(f"resume copy job {j['job_id']}", "POST", f"jobs/{int(j['job_id'])}/resume",
                              button="resume")
        out.append([job, state,
                    f"{escape(j['source_collection'])}/{escape(j['snapshot'])} &rarr; {escape(j['target_collection'])}",
                    bars, rate, eta, human_duration(j["duration_s"]),
                    f"{p['tasks_completed']}/{p['tasks']}" + (f" ({p['tasks_failed']} failed)" if p["tasks_failed"] else ""),
                    escape(j["reason"] or "")])
    return _table(["job", "state", "restore", "progress", "rate", "ETA", "duration", "tasks", "reason"], out,
                  numeric={4, 5, 6}, empty="no copy jobs")


def gc_chart(rows: list[dict], width: int = 640) -> str:
    """Bytes per (collection, reason) of the latest GC run as horizontal SVG bars."""
    if not rows:
        return '<p class="muted">no candidates in the latest run</p>'
    top = max(r["bytes"] for r in rows) or 1
    bar_h, gap, label_w = 18, 6, 220
    h = len(rows) * (bar_h + gap)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" role="img" '
             f'aria-label="gc candidates by collection and reason">']
    for i, r in enumerate(rows):
        y = i * (bar_h + gap)
        w = max(1.0, (width - label_w - 120) * r["bytes"] / top)
        name = r.get("collection") or (f"id {r['collection_id']}" if r["collection_id"] not in (None, -1) else "?")
        parts.append(f'<text x="0" y="{y + 13}" font-size="12">{escape(name)} &middot; {escape(r["reason"])}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="#e12d39"/>'
                     f'<text x="{label_w + w + 6:.1f}" y="{y + 13}" font-size="12">'
                     f'{human_bytes(r["bytes"])}, {r["files"]} files</text>')
    return "".join(parts) + "</svg>"


def _gc(g: dict | None, pause: dict) -> str:
    if pause.get("all"):
        p = '<p><span class="st warn">GC paused (all collections)</span></p>'
    elif pause.get("collections"):
        p = f'<p><span class="st warn">GC paused for collection ids {escape(", ".join(map(str, pause["collections"])))}</span></p>'
    else:
        p = '<p class="muted">GC not paused</p>'
    rec = pause.get("schedule")
    if rec:
        c = rec.get("conf") or {}
        p += (f'<p class="muted" data-gc-schedule="set">scheduled runs (when a schedule is set): '
              f'{"a dry run" if c.get("dry_run") else "a REAL run"} of '
              f'{escape(c["db"] + "." + c["collection"]) if c.get("collection") else "the whole store"}, '
              f'engine {escape(str(c.get("engine")))}; set at {utc(rec.get("set_at"))}'
              f'{" by " + escape(rec["set_by"]) if rec.get("set_by") else ""} (seglake gc schedule show)</p>')
    else:
        p += ('<p class="muted" data-gc-schedule="unset">scheduled runs: refused until an operator sets what they '
              'do (seglake gc schedule set --dry-run | --execute)</p>')
    if g is None:
        return p + '<p class="muted">no GC run recorded yet</p>'
    when = utc(g.get("started_at")) if g.get("started_at") else "?"
    if g.get("dag_run_id"):
        run = (f'<a class="runid" href="{escape(run_link(g.get("dag_id") or "gc", g["dag_run_id"]))}">'
               f'{escape(g["dag_run_id"])}</a>')
    else:   # a CLI run (seglake gc run): no Airflow run to link
        run = f'<span class="runid">{escape(str(g["run_id"]))}</span> (CLI)'
    kind = ('<span class="st warn" data-gc-kind="dry">DRY RUN: nothing deleted</span>' if g["dry_run"] else
            '<span class="st bad" data-gc-kind="real">REAL run</span>')
    found = (f'{g["candidates"]} files ({human_bytes(g["candidate_bytes"])}) a real run would delete'
             if g["dry_run"] else f'{g["candidates"]} candidates ({human_bytes(g["candidate_bytes"])})')
    head = f'<p>latest run {run} at {when} {kind}: listed {g["listed"]} objects, {found}</p>'

    kept = ", ".join(f"{escape(str(k))} {v}" for k, v in sorted(g["kept"].items())) or "none"
    swept = (f'swept: {g["deleted"]} files, {human_bytes(g["deleted_bytes"])} deleted'
             + (f', <span class="st bad">{g["error_count"]} could not be deleted</span>' if g["error_count"] else "")
             if g["swept"] else ("nothing swept (dry run)" if g["dry_run"] else
                                 (f'<span class="st warn" data-gc-sweep="stopped">sweep started at '
                                  f'{utc(g.get("sweep_started_at"))} and has not recorded its end: '
                                  f'{g["deleted"]} files ({human_bytes(g["deleted_bytes"])}) deleted so far'
                                  f'{" at least" if not g["deleted"] else ""}; it still runs, or stopped part-way '
                                  f'(gc again resumes it)</span>') if g.get("sweep_stopped") else "not swept yet"))
    return p + head + gc_chart(g["rows"]) + f'<p class="muted">kept by reason: {kept}; {swept}</p>'


def _channels(rows: list[dict]) -> str:
    return _table(["vchannel", "term", "writer", "last time tick (UTC)", "checkpoint lag", "paused", "open txns"],
                  [[escape(str(r.get("vchannel", ""))), escape(str(r.get("term", ""))),
                    escape(str(r.get("writer", ""))), escape(utc(r.get("last_tick_ts"))),
                    human_duration(r.get("lag_s")) if r.get("lag_s") is not None else "no checkpoint yet",
                    "yes" if r.get("paused") else "no",
                    escape(", ".join(str(t) for t in r.get("open_txns", ())) or "-")] for r in rows],
                  numeric={4}, empty="no WAL channels")


def _compaction_history(h: dict) -> str:
    """Compaction history (the last runs, newest first) and the per-collection policies."""
    runs = _table(["collection", "at (UTC)", "trigger", "engine", "segments", "rows dropped", "bytes reclaimed",
                   "units", "lost", "time"],
                  [[escape(str(r.get("collection") or r.get("collection_id"))), escape(utc(r.get("recorded_at"))),
                    escape(str(r.get("trigger", ""))), escape(str(r.get("engine", ""))),
                    f"{r.get('segments_before', 0)} &rarr; {r.get('segments_after', 0)}",
                    str(r.get("rows_dropped", 0)), human_bytes(r.get("bytes_reclaimed")), str(r.get("units", 0)),
                    str(r.get("lost", 0)), human_duration(r.get("seconds"))] for r in h.get("runs", [])],
                  numeric={5, 7, 8}, empty="no compaction yet")
    policies = _table(["collection", "policy", "scheduled"],
                      [[escape(f"{p['db']}.{p['collection']}"),
                        escape(", ".join(f"{k}={v}" for k, v in sorted(p["policy"].items())) or "config"),
                        "yes" if p["scheduled"] else "no"] for p in h.get("policies", [])],
                      empty="no compaction policies (config applies)")
    return runs + policies


def _backup(b: dict) -> str:
    """Exports (with the last verification of each bundle), pins, retention policies."""
    def verified(e: dict) -> str:
        if e.get("verified_ok") is None:
            return '<span class="muted">never</span>'
        return (_state("OK" if e["verified_ok"] else "BAD") + " "
                + f'<span class="muted">{escape(utc(e.get("verified_at")))}</span>')
    exports = _table(
        ["collection", "bundle", "snapshot", "state", "files", "size", "copied", "finished (UTC)", "target",
         "last verification"],
        [[escape(f"{e['db']}.{e['collection']}"), escape(e["bundle"]), escape(str(e.get("snapshot", ""))),
          (_state("stopped") + f' <span class="muted">{escape(e["stopped_note"])}</span>'
           if e.get("health") == "stopped" else _state(e["state"])),
          str(e.get("files", "-")), human_bytes(e["bytes"]) if "bytes" in e else "-",
          human_bytes(e["copied_bytes"]) if "copied_bytes" in e else "-",
          escape(utc(e.get("finished_at"))), f'<span class="muted">{escape(str(e.get("target", "")))}</span>',
          verified(e)] for e in b["exports"]],
        numeric={4, 5, 6}, empty="no exports (snapshot_export DAG, `seglake backup export`)")
    pins = _table(["pin", "collection", "snapshot", "until (UTC)", "by"],
                  [[str(p["pin_id"]) + " " + form(f"unpin {p['pin_id']}", "DELETE", f"pins/{int(p['pin_id'])}",
                                                   button="unpin"),
                    escape(str(p.get("collection"))), escape(str(p.get("snapshot"))),
                    escape(utc(p.get("expires_at"))), escape(p.get("by") or "-")] for p in b["pins"]],
                  empty="no pins")
    keep = ("keep_last", "keep_hourly", "keep_daily", "keep_weekly", "keep_monthly")
    pols = _table(["collection", "policy", "export", "WAL archive"],
                  [[escape(f"{p.get('db')}.{p.get('collection')}"),
                    escape(", ".join(f"{k.removeprefix('keep_')} {p[k]}" for k in keep if p.get(k)) or "-"),
                    "to the backup target" if p.get("export") is True else "no",
                    "on" if p.get("archive") is True else "no"]
                   for p in b["policies"]], empty="no retention policies")
    arch = _table(["pchannel", "collections", "shipped", "of", "behind", "oldest not shipped", "target"],
                  [[escape(a["pchannel"]), escape(", ".join(a["collections"])), str(a["shipped"]), str(a["last"]),
                    str(a["behind"]), human_duration(a["lag_s"]) if a["behind"] else "up to date",
                    f'<span class="muted">{escape(a.get("target") or "-")}</span>']
                   for a in b.get("archive", [])],
                  numeric={2, 3, 4}, empty="no collection's WAL is archived (`seglake retention set NAME --archive`)")
    cost = b.get("pitr") or {"windows": [], "pchannels": {}}
    held = cost["pchannels"]
    pitr = _table(["collection", "window", "base snapshot", "snapshot bytes", "log held", "only for the window"],
                  [[escape(f"{w['db']}.{w['collection']}"), escape(w["window"]), escape(w["snapshot"] or "its creation"),
                    human_bytes(w["snapshot_bytes"]),
                    human_bytes(sum(held.get(p, {}).get("log_bytes", 0) for p in w["fragments_from"])),
                    human_bytes(sum(held.get(p, {}).get("window_only_bytes", 0) for p in w["fragments_from"]))]
                   for w in cost["windows"]],
                  numeric={3, 4, 5}, empty="no point-in-time window (`seglake pitr set NAME 3d`)")
    reps = _table(["target", "from", "as of", "vchannels done", "replaying now", "log messages", "log read",
                   "of", "rate"],
                  [[escape(r["target"]), escape(r["source"]), escape(_tick(r["as_of"])),
                    f'{r["vchannels_done"]}/{r["vchannels"]}', escape(r["vchannel"] or "-"), str(r["messages"]),
                    human_bytes(r["bytes"]) + (f' ({r["percent"]:.1f}%)' if r.get("percent") is not None else ""),
                    human_bytes(r["bytes_total"]),
                    (f'<span class="st warn stalled">stalled for {escape(human_duration(r["stalled_s"]))}</span>'
                     if r.get("stalled_s") is not None else
                     (human_bytes(r["rate_bps"]) + "/s") if r.get("rate_bps") else "-")]
                   for r in b.get("replays", [])],
                  numeric={5, 6, 7}, empty="no restore to a time or undrop is replaying its log")
    return (exports + '<h3>Pins</h3>' + pins + '<h3>Retention schedules</h3>' + pols
            + '<h3>WAL archive (continuous backup)</h3>' + arch
            + '<h3>Point-in-time windows (what they hold)</h3>' + pitr
            + '<h3>Replays (restores to a time, undrops: their progress)</h3>' + reps)


def _milvus(m: dict) -> str:
    """Registered Milvus sources, their captures (bundles: time, rows, bytes, verified) and
    the restores into Milvus."""
    keep = ("keep_last", "keep_hourly", "keep_daily", "keep_weekly", "keep_monthly")
    srcs = _table(["source", "Milvus etcd", "bucket", "database", "collections", "retention", "verify", "connection"],
                  [[escape(str(d.get("name"))), escape(f"{d.get('milvus_etcd')} /{d.get('milvus_root')}"),
                    escape(f"{d.get('bucket')}/{d.get('bucket_root')}"), escape(str(d.get("db"))),
                    escape(", ".join(map(str, d.get("collections") or []))),
                    escape(", ".join(f"{k.removeprefix('keep_')} {d[k]}" for k in keep if d.get(k)) or "-"),
                    "yes" if d.get("verify") else "no", escape(str(d.get("conn_id")))]
                   if "error" not in d else [escape(str(d.get("name"))), f'<span class="err">{escape(d["error"])}</span>',
                                             "", "", "", "", "", ""]
                   for d in m.get("sources", [])],
                  empty="no Milvus source registered (`seglake milvus source set NAME ...`)")

    def verified(c: dict) -> str:
        if c.get("verified_ok") is None:
            return '<span class="muted">never</span>'
        return (_state("OK" if c["verified_ok"] else "BAD") + " "
                + f'<span class="muted">{escape(utc(c.get("verified_at")))}</span>')
    caps = _table(["source", "collection", "bundle", "captured (UTC)", "rows", "size", "copied", "files",
                   "verified", "pinned until"],
                  [[escape(str(c.get("source") or "-")), escape(f"{c['db']}.{c['collection']}"), escape(str(c["bundle"])),
                    escape(utc(c.get("finished_at") or c.get("created_at"))),
                    "-" if c.get("rows") is None else f"{c['rows']:,}", human_bytes(c.get("bytes")),
                    human_bytes(c.get("copied_bytes")), "-" if c.get("files") is None else str(c["files"]),
                    verified(c), escape(utc(c.get("pinned_until"))) if c.get("pinned_until") else "-"]
                   for c in m.get("captures", [])],
                  numeric={4, 5, 6, 7}, empty="no captures recorded (milvus_backup DAG, `seglake milvus backup`, "
                                              "or a source's schedule)")
    def segs(r: dict) -> str:
        if not r.get("segments_total"):
            return "-"
        failed = f", {r['segments_failed']} failed" if r.get("segments_failed") else ""
        return f"{r.get('segments_imported', 0)} of {r['segments_total']} imported{failed}"
    rest = _table(["restore", "bundle", "into", "Milvus", "state", "segments", "count(*)", "started (UTC)",
                   "verified (UTC)"],
                  [[f'<span class="runid">{escape(str(r["restore_id"]))}</span>', escape(str(r.get("bundle"))),
                    escape(str(r.get("name"))), escape(r.get("address") or "-"), _state(str(r.get("state"))) + (
                        ' <span class="st warn stalled">no run holds it: its milvus_restore run stopped? '
                        '(run it again with the same conf to resume)</span>' if r.get("stopped") else ""),
                    segs(r),
                    "-" if r.get("count") is None else f"{r['count']:,} of {r.get('visible_rows')}",
                    escape(utc(r.get("created_at"))), escape(utc(r.get("verified_at")))]
                   for r in m.get("restores", [])],
                  numeric={6}, empty="no restores into Milvus (milvus_restore DAG, `seglake milvus restore`)")
    return '<h3>Sources</h3>' + srcs + '<h3>Captures</h3>' + caps + '<h3>Restores into Milvus</h3>' + rest


def render_page(data: dict, can_act: bool = True, paused: list | None = None) -> str:
    """`can_act`: the user's role may start DAG runs; otherwise the page is read-only: no
    action is offered (each would be refused with 403), and it says so."""
    token = actions.CAN_ACT.set(can_act)
    try:
        return _render_page(data, can_act, paused)
    finally:
        actions.CAN_ACT.reset(token)


def _paused_line(paused: list | None) -> str:
    """The seglake DAGs with a schedule that are paused: nothing runs them (WAL not flushed,
    no scheduled snapshot, ...) until they are unpaused."""
    if not paused:
        return ""
    names = ", ".join(f"{escape(d)} ({escape(t)})" for d, t in paused)
    return (f'<p class="warn" id="paused-schedules">paused, so not run on their schedule: {names}; '
            "Airflow creates DAGs paused: unpause those you want (the toggle on the DAG's page)</p>")


def _render_page(data: dict, can_act: bool, paused: list | None = None) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(data["now"]))
    refresh = BUSY_REFRESH_S if busy(data) else REFRESH_S
    gc_sec = {"error": data["gc"]["error"] or data["gc_pause"]["error"],
              "rows": (data["gc"]["rows"], data["gc_pause"]["rows"] or {})}
    return "".join([
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>seglake</title>'
        f'<noscript><meta http-equiv="refresh" content="{refresh}"></noscript><style>{CSS}</style></head>'
        f'<body data-refresh="{refresh}">',
        f'<h1>seglake</h1><p class="muted">read at {stamp}; refreshes every {refresh}s; '
        f'<a href="metrics">metrics</a> &middot; <a href="api/overview">json</a> &middot; '
        f'<a href="api/v1/docs">REST API</a></p>'
        + ('' if can_act else '<p class="warn" id="read-only">read-only: your role may look but not start runs '
                              '(snapshots, restores, pins, GC, resumes); ask an operator</p>')
        + _paused_line(paused)
        + '<p id="action-result" role="status"></p>',
        _section("Collections", data["collections"], _collections),
        _section("Snapshots", data["snapshots"], _snapshots),
        _section("Copy jobs", data["jobs"], _jobs),
        _section("Garbage collection", gc_sec,
                 lambda r: form("GC dry run", "POST", "gc/dry-run", button="run a GC dry run (deletes nothing)")
                 + _gc(*r)),
        _section("Channels", data["channels"], _channels),
        _section("Compaction", data.get("compaction_history") or {"rows": {"runs": [], "policies": []},
                                                                   "error": None}, _compaction_history),
        _section("Backups", data.get("backup") or {"rows": {"exports": [], "pins": [], "policies": []},
                                                   "error": None}, _backup),
        _section("Milvus", data.get("milvus") or {"rows": {"sources": [], "captures": [], "restores": []},
                                                  "error": None}, _milvus),
        f"<script>{SCRIPT}</script></body></html>"])
