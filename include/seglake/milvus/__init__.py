"""Reading a real Milvus (2.3.x): its etcd metadata and its bucket, strictly read-only."""

import re

# The Milvus versions seglake reads and restores into: the 2.3 line (run against 2.3.5 here).
# 2.4 changed what this reads and writes (L0 delete segments, its import API): refused by name.
SUPPORTED = "2.3.x"
_SUPPORTED_RE = re.compile(r"v?2\.3\.\d{1,4}(?:[-+][0-9A-Za-z.+-]{0,64})?")


def check_version(version: str, where: str, doing: str) -> str:
    """`version` (a Milvus's own: 'v2.3.5', '2.3.5-dev') if seglake supports it, else a
    ValidationError naming it, before `doing` anything. '' (unknown: no component has
    registered one, a Milvus that is not running) passes: the metadata itself is then what
    is read, as for a running 2.3."""
    from seglake.errors import ValidationError

    if not isinstance(version, str) or len(version) > 128:
        raise ValidationError(f"Milvus at {where} reported an unreadable version: nothing {doing}")
    if version and not _SUPPORTED_RE.fullmatch(version):
        shown = "".join(ch if ch.isprintable() else "?" for ch in version)
        raise ValidationError(f"Milvus at {where} is version {shown!r}; seglake supports Milvus {SUPPORTED} (2.4 "
                              f"changed delete segments and the import API): nothing {doing}")
    return version
