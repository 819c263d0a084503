"""The REST API's docs page (`/seglake/api/v1/docs`, issue 27 item 4): rendered here from
the API's own OpenAPI document, one self-contained HTML page with no script, style sheet
or font from anywhere else -- Swagger UI from a CDN rendered 0 operations on a machine
without internet, and no installed package ships its assets. Each operation: method,
path, summary, parameters (with their pattern and bounds), the request body's fields and
the answers it documents; the raw document is linked (`openapi.json`)."""

from __future__ import annotations

import json
from html import escape

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em;max-width:70em;color:#222}
h1{font-size:1.4em} h2{font-size:1.1em;margin:1.6em 0 .4em}
.op{border:1px solid #ccd;border-radius:4px;margin:.6em 0;padding:.4em .8em}
.m{display:inline-block;min-width:4.5em;font-weight:bold;text-transform:uppercase}
.get{color:#1a6} .post{color:#15c} .delete{color:#c33} .patch,.put{color:#a60}
code{background:#f3f3f6;padding:0 .2em} table{border-collapse:collapse;margin:.3em 0}
td,th{border:1px solid #dde;padding:.15em .5em;text-align:left;vertical-align:top} .muted{color:#777}
"""


def _ref(schema: dict, comps: dict) -> tuple[str, dict]:
    """(the component's name or '', the schema with its $ref resolved)."""
    if isinstance(schema, dict) and "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return name, comps.get(name, {})
    return "", schema if isinstance(schema, dict) else {}


def _type(schema: dict, comps: dict) -> str:
    name, s = _ref(schema, comps)
    if name:
        return name
    if "anyOf" in s:
        return " | ".join(_type(x, comps) for x in s["anyOf"])
    if s.get("type") == "array":
        return f"array of {_type(s.get('items', {}), comps)}"
    return str(s.get("type", "any"))


def _rules(s: dict) -> str:
    keys = ("pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "maxLength", "enum", "default")
    return "; ".join(f"{k} {json.dumps(s[k])}" for k in keys if k in s)


def _fields(schema: dict, comps: dict) -> str:
    name, s = _ref(schema, comps)
    props = s.get("properties") or {}
    if not props:
        return f"<code>{escape(_type(schema, comps))}</code>"
    required = set(s.get("required", []))
    rows = "".join(
        f"<tr><td><code>{escape(k)}</code>{' *' if k in required else ''}</td>"
        f"<td>{escape(_type(v, comps))}</td><td>{escape(v.get('description', '') or v.get('title', ''))}"
        f"<span class=muted> {escape(_rules(v))}</span></td></tr>" for k, v in props.items())
    head = f"<code>{escape(name)}</code>" if name else ""
    extra = "" if s.get("additionalProperties", True) is not False else " (no other field)"
    return f"{head}{extra}<table><tr><th>field</th><th>type</th><th>about</th></tr>{rows}</table>"


def render_docs(schema: dict, openapi_url: str = "openapi.json") -> str:
    comps = schema.get("components", {}).get("schemas", {})
    info = schema.get("info", {})
    out = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(info.get('title', 'API'))} docs"
           f"</title><style>{CSS}</style></head><body>",
           f"<h1>{escape(info.get('title', 'API'))} <span class=muted>v{escape(str(info.get('version', '')))}</span>"
           f"</h1><p class=muted>{escape(info.get('description', ''))}</p>"
           f'<p>The OpenAPI document: <a href="{escape(openapi_url)}">{escape(openapi_url)}</a>. Paths are under '
           f"this page's folder (<code>/seglake/api/v1</code>). * required.</p>"]
    for path, ops in schema.get("paths", {}).items():
        for method, op in ops.items():
            params = "".join(
                f"<tr><td><code>{escape(p['name'])}</code>{' *' if p.get('required') else ''}</td>"
                f"<td>{escape(p.get('in', ''))}</td><td>{escape(_type(p.get('schema', {}), comps))}"
                f"<span class=muted> {escape(_rules(p.get('schema', {})))}</span></td>"
                f"<td>{escape(p.get('description', '') or '')}</td></tr>" for p in op.get("parameters", []))
            body = (op.get("requestBody") or {}).get("content", {}).get("application/json", {}).get("schema")
            answers = "".join(
                f"<tr><td>{escape(code)}</td><td>{escape(r.get('description', ''))}</td><td>"
                f"{escape(_type(((r.get('content') or {}).get('application/json') or {}).get('schema', {}), comps)) if r.get('content') else ''}"
                f"</td></tr>" for code, r in op.get("responses", {}).items())
            out.append(
                f'<div class="op" data-op="{escape(method.upper())} {escape(path)}">'
                f'<div><span class="m {escape(method)}">{escape(method)}</span><code>{escape(path)}</code> '
                f"{escape(op.get('summary', ''))}</div>"
                + (f"<h2>parameters</h2><table><tr><th>name</th><th>in</th><th>type</th><th>about</th></tr>"
                   f"{params}</table>" if params else "")
                + (f"<h2>body (JSON)</h2>{_fields(body, comps)}" if body else "")
                + f"<h2>answers</h2><table><tr><th>status</th><th>meaning</th><th>body</th></tr>{answers}</table>"
                + "</div>")
    names = sorted(comps)
    out.append("<h2>schemas</h2>" + "".join(f"<h3 id=\"{escape(n)}\">{escape(n)}</h3>{_fields({'$ref': '#/components/schemas/' + n}, comps)}"
                                          for n in names))
    out.append("</body></html>")
    return "".join(out)
