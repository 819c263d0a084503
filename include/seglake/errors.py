"""Typed errors: callers never see a raw gRPC, boto or OS exception from the engine."""


class SeglakeError(Exception):
    """Base of every error the engine raises on purpose."""


class ValidationError(SeglakeError, ValueError):
    """Bad input, refused before any side effect."""


class ConfigError(ValidationError):
    """A configuration value is unknown, of the wrong type or out of range."""


class NotFound(SeglakeError, KeyError):
    """A record or object does not exist."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep messages readable
        return str(self.args[0]) if self.args else "not found"


class CorruptRecord(SeglakeError, ValueError):
    """A persisted record (an etcd value, a record on the store or the backup target) that
    cannot be read: not JSON, NaN/Infinity/overflow, a field missing, of the wrong type or
    out of range. A destructive path that meets one keeps what it guards (fail closed)."""


class Conflict(SeglakeError):
    """A compare-guarded write lost a race, or the target already exists."""


class ClockSkewError(SeglakeError):
    """This process's clock and the TSO disagree by more than max_clock_skew: no
    timestamp is issued (or the TSO moved) until they agree."""


class Unavailable(SeglakeError):
    """The metadata store or object store cannot be reached (after retries)."""


class StateError(SeglakeError):
    """A transition is not allowed from the record's current state."""


_USERINFO_RE = __import__("re").compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s'\"]*@")


def redact(text: str) -> str:
    """`text` with the user info of every URI in it masked (s3://key:secret@bucket ->
    s3://***@bucket): a refusal that echoes a value never carries a credential."""
    return _USERINFO_RE.sub(r"\1***@", text)
