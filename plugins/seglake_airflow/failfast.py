"""Engine errors that no retry can fix (bad input, missing records, lost races, wrong
state) fail the task at once; everything else (etcd or S3 unavailable) is retried."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def fail_fast(*also: type[BaseException]):
    """`also`: further engine errors that are refusals, not outages (e.g. gc.GCError)."""
    from airflow.sdk.exceptions import AirflowFailException
    from seglake.errors import Conflict, NotFound, StateError, ValidationError

    try:
        yield
    except (Conflict, NotFound, StateError, ValidationError, *also) as e:
        raise AirflowFailException(f"{type(e).__name__}: {e}") from None
