"""The one reading of "a number" in results: a finite float of sane magnitude, or None for
anything else; and the one check of a run's figure against what a run can reach.

Every figure the toolkit reads (rank files, status, imported rows, the store) passes `finite`:
a value beyond `MAX_MAGNITUDE` (a finite 1e308 from a hostile or damaged file) is no figure,
so that the sums, medians and ratios of figures never overflow into infinity or NaN. The
physical bounds of one run (samples a second, seconds) are `parsers.foreign`'s, shared with the
foreign-log readers: `throughput_problem` says why a run's figure is refused.
"""

from __future__ import annotations

import math
from typing import Any

from parsers.foreign import MAX_RATE_SPS

MAX_MAGNITUDE = 1e100
"""Largest magnitude of any figure read from results: far beyond every measurement (bytes of
memory are under 1e20), and a sum or product of thousands of such figures stays finite."""


def finite(value: Any, *, parse_text: bool = False) -> float | None:
    """A finite float from an int or float; None for null, true/false, NaN, infinity and a
    magnitude beyond `MAX_MAGNITUDE` (an integer too large for a float included). With
    `parse_text`, numeric text ("12.5", as a CSV cell holds it) counts too; without it, text is
    not a number (a JSON string where a figure belongs)."""
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
    return number if math.isfinite(number) and abs(number) <= MAX_MAGNITUDE else None


def throughput_problem(value: float) -> str | None:
    """Why `value` (samples/s) cannot be a run's throughput; None when it can."""
    if not (math.isfinite(value) and 0 < value <= MAX_RATE_SPS):
        return (f"throughput {value!r} samples/s is not a positive finite number of at most "
                f"{MAX_RATE_SPS:g} (no run reaches it): the ranks' times or sample counts are "
                "not those of a run")
    return None
