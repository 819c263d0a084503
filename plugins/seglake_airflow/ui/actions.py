"""The seglake page's actions (issue 20 item 2): small forms whose submit is a same-origin
fetch() to the typed REST API (ui/api.py) with the anti-CSRF header, showing the run it
created as a link (or the refusal, one sentence). Works opened directly (/seglake/) and
inside Airflow's navigation (a sandboxed iframe: scripts, same origin and forms allowed,
dialogs not -- so no prompt()/confirm(): a drop asks by a second click).

The page reloads itself (every 2 s while something runs, else 10 s; every 2 s while a run
an action started lasts, before its copy job even exists), but not while a field has focus
or has been typed in, nor while a drop waits for its second click, nor while an action's
request is in flight (a reload would abort it: the run started, its answer lost); the last action's
result survives the reload for as long as its run lasts (its state read from Airflow's
API with the page's own session), then two minutes more with how it ended.

A user whose role may not start runs (a viewer) gets the page without any action and a
line saying it is read-only (each action would be refused with 403 anyway).

A run of a paused DAG (Airflow creates DAGs paused) says so instead of "started", with an
*unpause* button when the user's role may edit the DAG (the API's `can_unpause`).
Inside Airflow's frame, a link to an Airflow page (a run) opens in Airflow's own view,
not a second Airflow nested in the frame: the frame is same-origin, so the link is
handed to Airflow's router (history.pushState + popstate on the top window).
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from html import escape

from seglake.names import NAME_RE

CAN_ACT: ContextVar[bool] = ContextVar("seglake_can_act", default=True)   # set by render.render_page
NAME_HTML_PATTERN = NAME_RE.pattern   # the browser's own check of a name field (full match)

SCRIPT = r"""
(function () {
  var KEY = "seglake-last-action", pauseUntil = 0, KEEP = 120000, FINAL = ["success", "failed"], inflight = 0;
  var out = document.getElementById("action-result");
  function show(html, cls) { out.innerHTML = html; out.className = cls; }
  function esc(s) { var d = document.createElement("div"); d.textContent = String(s); return d.innerHTML; }
  function save(l) { sessionStorage.setItem(KEY, JSON.stringify(l)); }
  var last = sessionStorage.getItem(KEY), follow = false;
  if (last) {
    var l = JSON.parse(last);
    if (l.run && !l.endedAt) {   // kept while its run lasts: ask Airflow how the run is
      show(l.html, l.cls);
      if (l.cls === "warn") pauseUntil = Date.now() + 60000;   // a paused DAG: time to unpause
      follow = true;
      fetch("../api/v2/dags/" + encodeURIComponent(l.run.dag_id) + "/dagRuns/" + encodeURIComponent(l.run.run_id),
            {credentials: "same-origin"}).then(function (r) {
        // 404: the run was deleted from Airflow (not "still running": that would follow it for ever)
        return r.status === 404 ? {state: "deleted"} : r.ok ? r.json() : null;
      }).then(function (run) {
        if (!run || (FINAL.indexOf(run.state) < 0 && run.state !== "deleted")) return;
        l.endedAt = Date.now();
        l.html += run.state === "deleted" ? ' <span class="run-ended">(the run no longer exists in Airflow: ' +
          "it was deleted; what it did so far stays, see the tables below)</span>"
          : ' <span class="run-ended">(ended ' + esc(run.state) + ")</span>";
        l.cls = run.state === "success" ? "ok" : "err";
        save(l); show(l.html, l.cls);
      }).catch(function () {});
    } else if (Date.now() - (l.endedAt || l.at) < KEEP) {
      show(l.html, l.cls);
    }
  }
  var every = Number(document.body.dataset.refresh || 10) * 1000, timer = null;
  function poll(ms) {   // reload every ms, but never under a field being filled in
    if (timer) clearInterval(timer);
    timer = setInterval(function () {
      var a = document.activeElement, typed = Array.prototype.some.call(
        document.querySelectorAll("form.act input"), function (i) { return i.value !== i.defaultValue; });
      // never under a request: a reload would abort it and lose its answer (the run it started)
      if (inflight || Date.now() < pauseUntil || typed || (a && a.tagName === "INPUT")) return;
      location.reload();
    }, ms);
  }
  function remember(html, cls, run) {
    show(html, cls);
    save({html: html, cls: cls, at: Date.now(), run: run || null});
    if (cls === "err") return;   // a refusal keeps what was typed, to correct it
    Array.prototype.forEach.call(document.querySelectorAll("form.act input"), function (i) { i.value = i.defaultValue; });
    if (document.activeElement && document.activeElement.blur) document.activeElement.blur();
    if (run && cls === "warn") { pauseUntil = Date.now() + 60000; return; }   // time to read it and unpause
    if (run) poll(2000);   // a run started: follow it at once
  }
  document.addEventListener("click", function (ev) {   // inside Airflow's frame: Airflow's own view
    var a = ev.target.closest && ev.target.closest("a[href]");
    if (!a || window.top === window || a.getAttribute("href").indexOf("../") !== 0) return;
    var url = new URL(a.href);
    if (url.origin !== location.origin || url.pathname.indexOf("/seglake/") >= 0) return;
    try {
      var h = window.top.history, idx = ((h.state && h.state.idx) || 0) + 1;
      h.pushState({usr: null, key: Math.random().toString(36).slice(2, 10), idx: idx}, "", url.pathname + url.search);
      window.top.dispatchEvent(new PopStateEvent("popstate", {state: h.state}));
      ev.preventDefault();
    } catch (e) { /* not allowed: the link opens in the frame */ }
  });
  document.addEventListener("submit", function (ev) {
    var f = ev.target;
    if (!f.classList.contains("act")) return;
    ev.preventDefault();
    if (f.dataset.confirm && f.dataset.armed !== "1") {
      f.dataset.armed = "1";
      f.querySelector("button").textContent = f.dataset.confirm;
      pauseUntil = Date.now() + 30000;
      return;
    }
    var body = f.dataset.body ? JSON.parse(f.dataset.body) : {};
    Array.prototype.forEach.call(f.querySelectorAll("input[name]"), function (i) {
      if (i.value === "") return;
      body[i.name] = i.type === "number" ? Number(i.value) : i.value;
    });
    var method = f.dataset.method, init = {method: method, credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-Seglake-Request": "1"}};
    if (method !== "DELETE") init.body = JSON.stringify(body);
    var unpause = /\/unpause$/.test(f.dataset.path), before = out.innerHTML;
    if (!unpause) show("working...", "muted");
    inflight++;
    fetch("api/v1/" + f.dataset.path, init).finally(function () { inflight--; }).then(function (r) {
      return r.json().catch(function () { return {detail: r.status + " " + r.statusText}; })
        .then(function (d) { return {ok: r.ok, d: d}; });
    }).then(function (res) {
      var d = res.d;
      if (!res.ok) {
        if (unpause) { show(before + " " + esc(f.dataset.label + ": " + d.detail), "err"); return; }
        remember(esc(f.dataset.label + ": " + d.detail), "err"); return;
      }
      if (unpause) {   // the queued run starts now: keep its link, drop the paused note
        var l = JSON.parse(sessionStorage.getItem(KEY) || "{}"), p = out.querySelector(".paused");
        if (p) p.outerHTML = '<span class="unpaused">(' + esc(d.dag_id) + " unpaused: the run starts" +
          (d.message && /schedule/.test(d.message) ? "; " + esc(d.message.slice(d.message.indexOf(":") + 2)) : "") +
          ")</span>";
        remember(out.innerHTML, "ok", l.run || null);
        return;
      }
      if (d.run_url) {
        var link = "<a class=\"action-run\" href=\".." + esc(d.run_url) + "\">" + esc(d.dag_id + " " + d.dag_run_id) + "</a>";
        var html = esc(f.dataset.label) + ": " + (d.dag_paused === false && !d.waits ? "started " : d.dag_paused || d.waits ? "queued " : "created ") + link;
        if (d.waits) {   // queued behind the DAG's max_active_runs: said, not "started"
          html += ' <span class="paused">&mdash; ' + esc(d.waits) + "</span>";
        }
        if (d.dag_paused !== true && d.dag_paused !== false) {   // Airflow did not say: never claim it runs
          html += ' <span class="paused">&mdash; whether the DAG ' + esc(d.dag_id) + " is paused is unknown: check its page</span>";
        }
        if (d.dag_paused) {
          // the answer's own sentence: it says what unpausing also starts (a schedule's run: a REAL gc)
          var why = d.message && /schedule/.test(d.message) ? d.message.slice(d.message.indexOf("; unpausing") + 2) : "";
          html += ' <span class="paused">&mdash; the DAG ' + esc(d.dag_id) + " is paused: the run waits until it is unpaused" +
            (why ? ' <strong class="unpause-starts">(' + esc(why) + ")</strong>" : "") +
            (d.can_unpause ? ' <form class="act" data-method="POST" data-path="dags/' + esc(encodeURIComponent(d.dag_id)) +
              '/unpause" data-label="unpause ' + esc(d.dag_id) + '"><button type="submit">unpause ' + esc(d.dag_id) +
              "</button></form>" : "; ask someone who may edit the DAG to unpause it") + "</span>";
        }
        remember(html, d.dag_paused || d.waits ? "warn" : "ok", {dag_id: d.dag_id, run_id: d.dag_run_id});
      } else {
        remember(esc(f.dataset.label) + ": done" + (d.pin_id ? " (pin " + esc(d.pin_id) + ")" : ""), "ok");
      }
    }).catch(function (e) { remember(esc(f.dataset.label + ": " + e), "err"); });
  });
  poll(follow ? Math.min(every, 2000) : every);
})();
"""


def form(label: str, method: str, path: str, *, fields: tuple = (), body: dict | None = None,
         confirm: str = "", button: str = "") -> str:
    """One action: `fields` are (name, placeholder, kind) with kind 'name', 'number:default' (at
    least 0) or 'number:default:min' (at least min: the browser refuses less before a request).
    Nothing on a read-only page (CAN_ACT false: the user's role may not start runs)."""
    if not CAN_ACT.get():
        return ""
    inputs = []
    for name, placeholder, kind in fields:
        if kind == "name":
            inputs.append(f'<input name="{escape(name)}" placeholder="{escape(placeholder)}" required '
                          f'pattern="{escape(NAME_HTML_PATTERN)}" size="14" '
                          f'title="a letter or _, then letters, digits or _ (e.g. demo_1)">')
        else:   # 'number:default' (min 0) or 'number:default:min'
            _, default, *low = kind.split(":")
            low = low[0] if low else "0"
            inputs.append(f'<input name="{escape(name)}" type="number" step="any" min="{escape(low)}" '
                          f'value="{escape(default)}" '
                          f'title="{escape(placeholder)}" size="4" style="width:4em">')
    data = f' data-body="{escape(json.dumps(body))}"' if body else ""
    data += f' data-confirm="{escape(confirm)}"' if confirm else ""
    return (f'<form class="act" data-method="{method}" data-path="{escape(path)}" data-label="{escape(label)}"'
            f'{data}>{"".join(inputs)}<button type="submit">{escape(button or label)}</button></form>')
