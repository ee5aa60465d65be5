"""The one reading of "a number" in results: a finite float, or None for anything else."""

from __future__ import annotations

import math
from typing import Any


def finite(value: Any, *, parse_text: bool = False) -> float | None:
    """A finite float from an int or float; None for null, true/false, NaN, infinity and an
    integer too large for a float. With `parse_text`, numeric text ("12.5", as a CSV cell holds
    it) counts too; without it, text is not a number (a JSON string where a figure belongs)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        if not parse_text:
            return None
        try:
            value = float(value)
        except ValueError:
            return None
    if not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
