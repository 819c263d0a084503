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


def pin_leases_over(meta, timeout: float = 15.0) -> None:
    """Wait until every snapshot pin's etcd lease has expired (etcd times a lease in whole
    seconds, at least its minimum TTL): a pin is live while its wall-clock expiry is ahead
    OR its lease lives, so a test that waits for a pin to end waits for both."""
    import time

    deadline = time.monotonic() + timeout
    prefix = f"{meta.keys.root}/snapshot_pin_leases/"
    while list(meta.kv.range(prefix)):
        if time.monotonic() > deadline:
            raise AssertionError(f"pin leases under {prefix} still live after {timeout} s")
        time.sleep(0.1)
