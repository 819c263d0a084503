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


def validate_name(kind: str, value: object) -> str:
    """Return `value` if it is a valid `kind` name (collection, partition, snapshot, db)."""
    if not isinstance(value, str):
        raise ValidationError(f"invalid {kind} name {value!r}: must be a string")
    if not value:
        raise ValidationError(f"invalid {kind} name: must not be empty")
    if len(value) > 255:
        raise ValidationError(f"invalid {kind} name {value[:20]!r}...: longer than 255 characters")
    if not NAME_RE.fullmatch(value):
        raise ValidationError(
            f"invalid {kind} name {value!r}: must start with a letter or '_' and contain only "
            "letters, digits and '_'"
        )
    return value
