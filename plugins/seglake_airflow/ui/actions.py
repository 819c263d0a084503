"""The seglake page's actions (issue 20 item 2): small forms whose submit is a same-origin
fetch() to the typed REST API (ui/api.py) with the anti-CSRF header, showing the run it
created as a link (or the refusal, one sentence). Works opened directly (/seglake/) and
inside Airflow's navigation (a sandboxed iframe: scripts, same origin and forms allowed,
dialogs not -- so no prompt()/confirm(): a drop asks by a second click).

The page reloads itself (every 2 s while something runs, else 10 s; every 2 s for two
minutes after an action started a run, before its copy job even exists), but not while a field has focus or has been typed in,
nor while a drop waits for its second click; the last action's result survives the
reload."""

from __future__ import annotations

import json
from html import escape

from seglake.names import NAME_RE

NAME_HTML_PATTERN = NAME_RE.pattern   # the browser's own check of a name field (full match)

SCRIPT = r"""
(function () {
  var KEY = "seglake-last-action", pauseUntil = 0;
  var out = document.getElementById("action-result");
  function show(html, cls) { out.innerHTML = html; out.className = cls; }
  function esc(s) { var d = document.createElement("div"); d.textContent = String(s); return d.innerHTML; }
  var last = sessionStorage.getItem(KEY), follow = false;
  if (last) {
    var l = JSON.parse(last);
    if (Date.now() - l.at < 120000) show(l.html, l.cls);
    follow = l.started && Date.now() - l.at < 120000;   // a run started here lately: keep following it
  }
  var every = Number(document.body.dataset.refresh || 10) * 1000, timer = null;
  function poll(ms) {   // reload every ms, but never under a field being filled in
    if (timer) clearInterval(timer);
    timer = setInterval(function () {
      var a = document.activeElement, typed = Array.prototype.some.call(
        document.querySelectorAll("form.act input"), function (i) { return i.value !== i.defaultValue; });
      if (Date.now() < pauseUntil || typed || (a && a.tagName === "INPUT")) return;
      location.reload();
    }, ms);
  }
  function remember(html, cls, started) {
    show(html, cls);
    sessionStorage.setItem(KEY, JSON.stringify({html: html, cls: cls, at: Date.now(), started: !!started}));
    if (cls !== "ok") return;   // a refusal keeps what was typed, to correct it
    Array.prototype.forEach.call(document.querySelectorAll("form.act input"), function (i) { i.value = i.defaultValue; });
    if (document.activeElement && document.activeElement.blur) document.activeElement.blur();
    if (started) poll(2000);   // a run started: follow it at once
  }
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
    show("working...", "muted");
    fetch("api/v1/" + f.dataset.path, init).then(function (r) {
      return r.json().catch(function () { return {detail: r.status + " " + r.statusText}; })
        .then(function (d) { return {ok: r.ok, d: d}; });
    }).then(function (res) {
      var d = res.d;
      if (!res.ok) { remember(esc(f.dataset.label + ": " + d.detail), "err"); return; }
      if (d.run_url) {
        remember(esc(f.dataset.label) + ": started <a class=\"action-run\" href=\".." + esc(d.run_url) + "\">" +
                 esc(d.dag_id + " " + d.dag_run_id) + "</a>", "ok", true);
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
    """One action: `fields` are (name, placeholder, kind) with kind 'name' or 'number:default'."""
    inputs = []
    for name, placeholder, kind in fields:
        if kind == "name":
            inputs.append(f'<input name="{escape(name)}" placeholder="{escape(placeholder)}" required '
                          f'pattern="{escape(NAME_HTML_PATTERN)}" size="14" '
                          f'title="a letter or _, then letters, digits or _ (e.g. demo_1)">')
        else:
            default = kind.split(":", 1)[1]
            inputs.append(f'<input name="{escape(name)}" type="number" step="any" min="0" value="{escape(default)}" '
                          f'title="{escape(placeholder)}" size="4" style="width:4em">')
    data = f' data-body="{escape(json.dumps(body))}"' if body else ""
    data += f' data-confirm="{escape(confirm)}"' if confirm else ""
    return (f'<form class="act" data-method="{method}" data-path="{escape(path)}" data-label="{escape(label)}"'
            f'{data}>{"".join(inputs)}<button type="submit">{escape(button or label)}</button></form>')
