"""A bundle's segment entries checked against the manifest's Avro schema before anything
is built from them (bundle.check): every long an integer in 0..2**63-1 (ids, counts,
sizes, timestamps: none is negative), every string a string, every array a list, a
field missing only where the schema has a default, no key the schema does not have
(refused naming the closest valid one: a misspelt key would be ignored, its default used). The schema is compiled once into
checkers; a field a later schema adds is checked by its own type."""

from __future__ import annotations

from seglake import limits, manifest


class _Bad(Exception):
    def __init__(self, at: list, why: str):
        self.at, self.why = at, why


def _compile(schema, named: dict):
    """A checker for values of an Avro schema (built once: the manifest's entry schema is
    walked for every segment of every bundle read). Raises _Bad(path, why)."""
    if isinstance(schema, str) and schema in named:
        return named[schema]
    if isinstance(schema, list):                                    # a union: ["null", ...]
        inner = _compile(next(x for x in schema if x != "null"), named)

        def union(v):
            if v is not None or "null" not in schema:
                inner(v)
        return union
    kind = schema if isinstance(schema, str) else schema.get("type")
    if kind in ("long", "int"):
        def long(v):
            if type(v) is not int or not 0 <= v <= limits.ID_MAX:
                raise _Bad([], f"is {v!r}, not an integer in 0..{limits.ID_MAX}")
        return long
    if kind == "string":
        def string(v):
            if not isinstance(v, str):
                raise _Bad([], f"is {v!r}, not a string")
        return string
    if kind in ("array", "map"):
        item = _compile(schema["items" if kind == "array" else "values"], named)
        container = list if kind == "array" else dict

        def many(v):
            if not isinstance(v, container):
                raise _Bad([], f"is not a {kind}")
            for k, x in (enumerate(v) if kind == "array" else v.items()):
                try:
                    item(x)
                except _Bad as b:
                    b.at.insert(0, f"[{k!r}]")
                    raise
        return many
    if kind == "record":
        fields = []

        def record(v):
            if not isinstance(v, dict):
                raise _Bad([], "is not a record")
            for k in v:
                if k not in known:
                    raise _Bad([], f"has an unknown key {k!r}{closest(k, known)}")
            for name, check, required in fields:
                if name in v:
                    try:
                        check(v[name])
                    except _Bad as b:
                        b.at.insert(0, f".{name}")
                        raise
                elif required:
                    raise _Bad([], f"has no {name!r}")
        named[schema["name"]] = record    # before its fields: a field may name it
        fields.extend((f["name"], _compile(f["type"], named), "default" not in f) for f in schema["fields"])
        known = [f["name"] for f in schema["fields"]]
        return record
    return lambda v: None                 # any other kind (a later schema's) is left to the decoder


def closest(key, valid) -> str:
    """' (did you mean ...?)', or the valid keys: for an unknown key's error (a key
    misspelt would otherwise be ignored and its default used)."""
    import difflib

    near = difflib.get_close_matches(str(key), list(valid), n=1, cutoff=0.5)
    return f" (did you mean {near[0]!r}?)" if near else f" (valid keys: {', '.join(sorted(valid))})"


_checker = None


def problem(e) -> str | None:
    """What is wrong with segment entry `e` ("num_rows is -1, not an integer in ..."),
    or None when it fits the schema."""
    global _checker
    if _checker is None:
        _checker = _compile(manifest.SCHEMA, {})
    try:
        _checker(e)
    except _Bad as b:
        return f"{''.join(b.at).lstrip('.') or 'the entry'} {b.why}"
    return None
