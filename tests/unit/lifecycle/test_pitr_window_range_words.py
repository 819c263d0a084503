"""A point-in-time window out of range is refused in the units it is written in ("1 minute
.. 365 days"), naming the value -- not as the limit table's seconds under its internal key
('pitr_window': 10.0 ... must be >= 60.0 and <= 31536000.0)."""

import pytest

from seglake.errors import ValidationError
from seglake.lifecycle.pitr.window import parse_window


@pytest.mark.parametrize("value", ["10s", "400d", 59, "0"])
def test_out_of_range_window_is_said_in_words(value):
    with pytest.raises(ValidationError) as e:
        parse_window(value)
    assert str(e.value) == f"window {value!r} is out of range: 1 minute (60, 1m) to 365 days (365d)"


def test_edges_are_taken():
    assert parse_window("1m") == ("1m", 60.0) and parse_window("365d") == ("365d", 365 * 86400.0)
