"""Helpers of the attack-archive tests (not a test module)."""
import os
import time


def age_all(store, seconds=3 * 86400):
    t = time.time() - seconds
    for o in store.list(""):
        os.utime(store.root / o.key, (t, t))
