"""What a test may compare to say "nothing was written to etcd": the keys under its own root
with their mod revisions. The server's global revision is no witness on a shared etcd: it also
moves when another test's lease runs out or another test writes under its own root."""


def root_state(meta) -> tuple:
    """Every (key, mod_revision) under meta's root, sorted: equal before and after a call iff the
    call put, changed or deleted nothing under that root."""
    return tuple(sorted((kv.key, kv.mod_revision) for kv in meta.kv.range(meta.keys.prefix)))


def root_changes(before: tuple, after: tuple) -> list:
    """The keys that differ between two root_state()s (for a failure message)."""
    a, b = dict(before), dict(after)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def pin_leases_over(meta, timeout: float = 15.0, what: str = "snapshot_pin_leases") -> None:
    """Wait until every snapshot pin's etcd lease has expired (etcd times a lease in whole
    seconds, at least its minimum TTL): a pin is live while its wall-clock expiry is ahead
    OR its lease lives, so a test that waits for a pin to end waits for both."""
    import time

    deadline = time.monotonic() + timeout
    prefix = f"{meta.keys.root}/{what}/"
    while list(meta.kv.range(prefix)):
        if time.monotonic() > deadline:
            raise AssertionError(f"leases under {prefix} still live after {timeout} s")
        time.sleep(0.1)


def ttl_leases_over(meta, timeout: float = 15.0) -> None:
    """Wait until every snapshot TTL's etcd lease has expired (a snapshot expires when its
    wall-clock expiry has passed AND its lease is gone)."""
    pin_leases_over(meta, timeout, "snapshot_ttl_leases")


def ttl_over(meta, rec, timeout: float = 15.0) -> None:
    """Wait until snapshot `rec`'s TTL has run out by both clocks: the wall clock and etcd's
    (its TTL lease gone)."""
    import time

    deadline = time.monotonic() + timeout
    while time.time() <= rec.expires_at or meta.kv.get(meta.keys.snapshot_ttl_lease(rec.snapshot_id)):
        if time.monotonic() > deadline:
            raise AssertionError(f"snapshot {rec.name!r}'s TTL still running after {timeout} s")
        time.sleep(0.1)


def etcd_clock_past_ttls(meta) -> None:
    """As if etcd's clock had passed every snapshot's TTL: its TTL lease keys deleted (for
    a test that judges expiry with a `now=` far ahead instead of waiting a long TTL)."""
    meta.kv.delete_prefix(f"{meta.keys.root}/snapshot_ttl_leases/")
