r"""Name validation at the edge, following Milvus: a letter or underscore, then letters,
digits and underscores, 255 characters at most. Checked before any side effect.

Always a FULL match: `re.match` with `$` accepts "abc\n" (`$` matches before a trailing
newline), and so does a JSON-schema `pattern` (jsonschema uses re.search). NAME_PATTERN
therefore ends in `$(?!\n)`, which means "end of string" in Python's re and in the
browser's regexes alike (`\Z` is Python-only)."""

import re

from seglake.errors import ValidationError

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")    # use with fullmatch only
NAME_PATTERN = rf"^{NAME_RE.pattern}$(?!\n)"            # the DAG Param forms (JSON schema)
# NAME_RE in words: what every refusal and every form field says (never the regex)
NAME_RULE = "a letter or '_', then letters, digits or '_' (at most 255 characters, no spaces)"


def validate_name(kind: str, value: object) -> str:
    """Return `value` if it is a valid `kind` name (collection, partition, snapshot, db)."""
    if not isinstance(value, str):
        raise ValidationError(f"invalid {kind} name {value!r}: must be a string")
    if not value:
        raise ValidationError(f"invalid {kind} name: must not be empty")
    if len(value) > 255:
        raise ValidationError(f"invalid {kind} name {value[:20]!r}...: longer than 255 characters")
    if not NAME_RE.fullmatch(value):
        raise ValidationError(f"invalid {kind} name {value!r}: a name is {NAME_RULE}, e.g. demo_1")
    return value


# -- free text an operator types (a description, who pinned, why a pause) ----------------------
def check_text(what: str, value: object, max_length: int = 256) -> str:
    """`value` if it is printable text of at most `max_length` characters, else one
    ValidationError naming `what` (the value shown short, escaped: it may hold an escape
    sequence meant for a terminal). It is stored in etcd and shown by the CLI, the page and
    the logs: no NUL, line break or escape; and bounded (an etcd request is at most 1.5 MiB)."""
    if not isinstance(value, str) or len(value) > max_length or not value.isprintable():
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValidationError(f"{what}: {shown} is not allowed; allowed: printable text of at most {max_length} "
                              f"characters (no line breaks)")
    return value


# -- etcd endpoints: host:port, or a comma list of them for a cluster ----------------------
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"  # '_' inside: container names (etcd_1)
ENDPOINT_RE = re.compile(rf"({_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\]):([1-9][0-9]{{0,4}})", re.ASCII)
MAX_ENDPOINTS = 32


def parse_endpoints(key: str, value: object) -> list[tuple[str, int]]:
    """[(host, port)] of 'host:port' or 'h1:p1,h2:p2,...' (an etcd cluster): each member
    full-matches host:port (a DNS name, an IPv4 address or a bracketed IPv6 address; a
    port 1..65535 in plain digits), no scheme, spaces, empty member or repeat."""
    import ipaddress

    if not isinstance(value, str) or not value:
        raise ValidationError(f"{key}: expected host:port (or a comma list for a cluster), got {value!r}")
    members = value.split(",")
    if len(members) > MAX_ENDPOINTS:
        raise ValidationError(f"{key}: more than {MAX_ENDPOINTS} endpoints")
    out: list[tuple[str, int]] = []
    for ep in members:
        if "@" in ep:   # user:password@host:port -- never echoed (a credential in the wrong field)
            raise ValidationError(f"{key}: {'***@' + ep.rsplit('@', 1)[1]!r} carries user info before '@' (a "
                                  f"credential?): an endpoint is host:port; credentials go in their own settings "
                                  f"(etcd_user / etcd_password, the connection's login and password)")
        m = ENDPOINT_RE.fullmatch(ep)
        if m is None or len(m.group(1)) > 253 or int(m.group(2)) > 65535:
            raise ValidationError(f"{key}: {ep!r} is not host:port with a port 1..65535 "
                                  f"(members of a cluster joined by ',' without spaces)")
        host, port = m.group(1), int(m.group(2))
        try:
            if host.startswith("["):
                ipaddress.IPv6Address(host[1:-1])
            elif re.fullmatch(r"[0-9.]+", host):
                ipaddress.IPv4Address(host)
        except ValueError:
            raise ValidationError(f"{key}: {host!r} in {ep!r} is not a valid IP address") from None
        if (host.lower(), port) in {(h.lower(), p) for h, p in out}:
            raise ValidationError(f"{key}: {ep!r} is listed twice")
        out.append((host, port))
    return out
