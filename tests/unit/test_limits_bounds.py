"""How a Limit says its bounds in an error (seglake.limits)."""

from __future__ import annotations

import pytest

from seglake.errors import ValidationError


def test_a_bound_scaled_to_no_short_decimal_is_said_plainly():
    """`seglake milvus pin --ttl-hours 0` said 'must be >= 0.0002777777777777778 and <= 8760':
    the 1-second floor of a pin in hours. Rounded now, with the exact value in seconds."""
    from seglake.limits import HOUR, LIMITS

    with pytest.raises(ValidationError) as e:
        LIMITS["pin_ttl"].check("ttl_hours", 0.0, HOUR)
    assert str(e.value) == "ttl_hours: 0.0 is out of range, must be >= 0.000278 (1 s) and <= 8760"
    with pytest.raises(ValidationError) as e:   # unscaled bounds stay as they were
        LIMITS["pin_ttl"].check("ttl", 0.5)
    assert str(e.value) == "ttl: 0.5 is out of range, must be >= 1.0 and <= 31536000.0"
