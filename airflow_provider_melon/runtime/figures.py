"""A figure in the JSON that the ResourceManager, the ApplicationMaster or a run's history wrote, read one way (stdlib
only). It lives here, in the container payload, so that ``gpu/`` can use it as well as ``hadoop/``, the operators and
the UI plugin."""

from __future__ import annotations

import math
from typing import Any, Optional

__all__ = ["finite_number"]


def finite_number(value: Any) -> Optional[float]:
    """``value`` (an int, a float or a numeric string) as a finite float, else None: a bool, ``null``, ``""``, text,
    ``Infinity`` and ``NaN`` (which JSON parsers accept) and an int too large for a float are no figure."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None
