"""Name validation at the edge, following Milvus: a letter or underscore, then letters,
digits and underscores, 255 characters at most. Checked before any side effect."""

import re

from seglake.errors import ValidationError

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
NAME_PATTERN = NAME_RE.pattern  # shared with the DAG Param forms


def validate_name(kind: str, value: object) -> str:
    """Return `value` if it is a valid `kind` name (collection, partition, snapshot, db)."""
    if not isinstance(value, str):
        raise ValidationError(f"invalid {kind} name {value!r}: must be a string")
    if not value:
        raise ValidationError(f"invalid {kind} name: must not be empty")
    if len(value) > 255:
        raise ValidationError(f"invalid {kind} name {value[:20]!r}...: longer than 255 characters")
    if not NAME_RE.match(value):
        raise ValidationError(
            f"invalid {kind} name {value!r}: must start with a letter or '_' and contain only "
            "letters, digits and '_'"
        )
    return value
