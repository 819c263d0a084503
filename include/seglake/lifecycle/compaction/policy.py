"""What a compaction is asked to do (Policy: the config keys, overridable per run) and the
unit it plans (Unit: small, serializable, its id a pure function of what it compacts)."""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

import msgspec

from seglake import limits
from seglake.errors import ValidationError

POLICY_KEYS = ("min_segment_rows", "min_segment_bytes", "target_rows", "target_bytes", "delete_ratio", "l0_age",
               "protection")

MERGE, REWRITE = "merge", "rewrite"        # kinds of unit: small segments merged, one segment rewritten
FOLD = "fold"          # L0 delete segments folded into the segments they hit (lifecycle/compaction/folding)
KINDS = (MERGE, REWRITE, FOLD)
# inputs per unit: its commit compares every input, the output key, the unit record and the
# collection record in one txn (etcd --max-txn-ops 128)
MAX_INPUTS = 100
# a fold's txn: every L0 input and hit compared and rewritten, one output per hit
# (compares: inputs + 2 x hits + 2; puts: inputs + 2 x hits + 1)
MAX_FOLD_OPS = 120


@dataclass(frozen=True)
class Policy:
    """Config keys compaction_<name>; each checked with its seglake.limits range."""
    min_segment_rows: int = 100_000
    target_rows: int = 1_000_000
    delete_ratio: float = 0.2
    protection: float = 3600.0
    min_segment_bytes: int = 0               # 0: small by rows only
    target_bytes: int = 1 << 30
    l0_age: float = 3600.0                    # L0 delete segments older than this are folded

    def __post_init__(self) -> None:
        for f in fields(self):
            limits.check(f"compaction_{f.name}", f"compaction_{f.name}", getattr(self, f.name))

    @classmethod
    def from_settings(cls, settings, overrides: Mapping[str, Any] | None = None) -> "Policy":
        """The settings' policy with `overrides` ({name or compaction_name: value}; None
        values ignored): an unknown key is refused naming the closest one."""
        base = {f.name: getattr(settings, f"compaction_{f.name}") for f in fields(cls)}
        return cls(**{**base, **_checked_keys(overrides or {})})

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Policy":
        return cls(**_checked_keys(d))


def policy_key(k: Any, known) -> str | None:
    """The policy key `k` names (`x` or `compaction_x`), or None."""
    name = k[len("compaction_"):] if isinstance(k, str) and k.startswith("compaction_") else k
    return name if isinstance(name, str) and name in known else None


def closest_key(k: Any, known) -> str:
    """' (did you mean ...?)' for an unknown key -- its case ignored too ('MIN_SEGMENT_ROWS'),
    a `compaction_` prefix allowed -- or the list of the known keys."""
    text = str(k)
    low = text.lower()
    low = low[len("compaction_"):] if low.startswith("compaction_") else low
    near = difflib.get_close_matches(low, list(known), n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else f"; valid keys: {', '.join(known)}"


def duplicate_keys(values: Mapping[Any, Any], known) -> list[str]:
    """Messages for two keys of `values` naming the same policy key (`x` and `compaction_x`):
    which one was meant cannot be told -- the later one silently won (attack s25)."""
    seen: dict[str, Any] = {}
    out = []
    for k in values:
        name = policy_key(k, known)
        if name is None:
            continue
        if name in seen:
            out.append(f"keys {seen[name]!r} and {k!r} both set {name!r}; give it once")
        else:
            seen[name] = k
    return out


def _checked_keys(values: Mapping[str, Any]) -> dict:
    known = [f.name for f in fields(Policy)]
    out = {}
    for k, v in values.items():
        name = policy_key(k, known)
        if name is None:
            raise ValidationError(f"unknown compaction policy key {k!r}{closest_key(k, known)}")
        if v is not None:
            out[name] = v
    dup = duplicate_keys(values, known)
    if dup:
        raise ValidationError("compaction policy refused: " + "; ".join(dup))
    return out


class Unit(msgspec.Struct, frozen=True, kw_only=True):
    """One compaction unit: input segments of one partition and vchannel, each at the etcd
    mod revision the plan read it at, into one output segment. `rows`/`deleted`: the
    inputs' rows and those hidden when planned (the expected gain)."""
    unit_id: str
    collection_id: int
    partition_id: int
    channel: str
    kind: str
    inputs: tuple[tuple[int, int], ...]      # (segment id, mod revision), by segment id
    # FOLD only: the segments the inputs' deletes hit, (segment id, partition id, mod
    # revision) by segment id, each rewritten into its own output in the fold's txn
    hits: tuple[tuple[int, int, int], ...] = ()
    # FOLD only: the hits whose OWN delete entries are folded too (not carried to their
    # output): row-bearing segments whose delta log is old enough to fold
    folded: tuple[int, ...] = ()
    # FOLD only: the newest delete timestamp the fold forgets. A folded carrier's own delete
    # entries at or below it are folded, newer ones carried to its output (0: all of them,
    # a unit planned before per-entry folding)
    fold_ts: int = 0
    rows: int = 0
    deleted: int = 0
    bytes: int = 0
    delta_logs: int = 0

    @property
    def segment_ids(self) -> list[int]:
        return [s for s, _ in self.inputs]

    def to_json(self) -> dict:
        return msgspec.to_builtins(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Unit":
        """A unit from its JSON (XCom, a Spark argv file, the unit record), checked: the
        id must be the one its content gives (a hand-edited unit is refused)."""
        try:
            u = msgspec.convert(dict(d), cls, strict=True)
        except (msgspec.ValidationError, TypeError) as e:
            raise ValidationError(f"not a compaction unit: {e}") from None
        u.check()
        return u

    def check(self) -> None:
        if self.kind not in KINDS:
            raise ValidationError(f"unit {self.unit_id}: kind {self.kind!r} is not one of {KINDS}")
        for name in ("collection_id", "partition_id"):
            limits.check("id", f"unit {name}", getattr(self, name))
        least = 0 if self.kind == FOLD and self.folded else 1      # a fold of row-bearing carriers only
        if not least <= len(self.inputs) <= MAX_INPUTS:
            raise ValidationError(f"unit {self.unit_id}: {len(self.inputs)} inputs, must be {least}..{MAX_INPUTS}")
        ids = [s for s, _ in self.inputs]
        if ids != sorted(set(ids)):
            raise ValidationError(f"unit {self.unit_id}: inputs must be distinct and sorted by segment id")
        for s, rev in self.inputs:
            limits.check("id", "unit input segment id", s)
            limits.check("id", "unit input revision", rev)
        for name in ("rows", "deleted", "bytes", "delta_logs"):
            v = getattr(self, name)
            if not 0 <= v <= limits.ID_MAX:
                raise ValidationError(f"unit {self.unit_id}: {name} {v} is out of range (0..{limits.ID_MAX})")
        if not self.channel or len(self.channel) > 255 or not self.channel.isprintable():
            raise ValidationError(f"unit {self.unit_id}: channel {self.channel!r} is not a vchannel name")
        if isinstance(self.fold_ts, bool) or not 0 <= self.fold_ts <= limits.ID_MAX:
            raise ValidationError(f"unit {self.unit_id}: fold_ts {self.fold_ts} is out of range (0..{limits.ID_MAX})")
        if (self.hits or self.folded or self.fold_ts) and self.kind != FOLD:
            raise ValidationError(f"unit {self.unit_id}: only a {FOLD} unit has hits")
        if list(self.folded) != sorted(set(self.folded)) or not set(self.folded) <= {h[0] for h in self.hits}:
            raise ValidationError(f"unit {self.unit_id}: folded must be distinct, sorted hits")
        hit_ids = [h[0] for h in self.hits]
        if hit_ids != sorted(set(hit_ids)) or set(hit_ids) & set(ids):
            raise ValidationError(f"unit {self.unit_id}: hits must be distinct, sorted and not inputs")
        for sid, pid, rev in self.hits:
            for v in (sid, pid, rev):
                limits.check("id", "unit hit", v)
        if self.kind == FOLD and len(self.inputs) + 2 * len(self.hits) > MAX_FOLD_OPS:
            raise ValidationError(f"unit {self.unit_id}: {len(self.inputs)} inputs and {len(self.hits)} hits do not "
                                  f"fit one txn (inputs + 2 x hits <= {MAX_FOLD_OPS})")
        want = unit_id(self.collection_id, self.partition_id, self.channel, self.kind, self.inputs, self.hits,
                       self.folded, self.fold_ts)
        if self.unit_id != want:
            raise ValidationError(f"unit id {self.unit_id!r} does not match its content (expected {want!r})")


def unit_id(collection_id: int, partition_id: int, channel: str, kind: str, inputs, hits=(), folded=(),
            fold_ts: int = 0) -> str:
    """A pure function of what the unit compacts (inputs, and a fold's hits, at their
    revisions): the same state plans the same id; any change of one plans a new one."""
    doc = [collection_id, partition_id, channel, kind, [list(x) for x in inputs]]
    if hits:
        doc.append([list(h) for h in hits])
    if folded:
        doc.append(list(folded))
    if fold_ts:
        doc.append(fold_ts)
    raw = json.dumps(doc, separators=(",", ":"))
    first = (list(inputs) or list(hits) or [(0,)])[0][0]
    return f"{partition_id}-{first}-{hashlib.sha256(raw.encode()).hexdigest()[:16]}"


def make_unit(collection_id: int, partition_id: int, channel: str, kind: str, inputs, hits=(), folded=(),
              fold_ts: int = 0, **sizes) -> Unit:
    inputs = tuple(sorted((int(s), int(r)) for s, r in inputs))
    hits = tuple(sorted((int(s), int(p), int(r)) for s, p, r in hits))
    folded = tuple(sorted(int(s) for s in folded))
    u = Unit(unit_id=unit_id(collection_id, partition_id, channel, kind, inputs, hits, folded, int(fold_ts)),
             collection_id=collection_id, partition_id=partition_id, channel=channel, kind=kind, inputs=inputs,
             hits=hits, folded=folded, fold_ts=int(fold_ts), **sizes)
    u.check()
    return u
