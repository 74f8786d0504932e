"""Sanity of a typed flag value beyond what the framework's argparse checks (issue 13 item 12):
argparse takes `--mem-fraction-static nan`, `7` or `--max-running-requests -4`, and then the
server (or the simulator) fails in ways that read like a performance result. Pure.

The rules are generic, by type and name, so a new flag table needs no entry here: numbers are
finite; counts and sizes are not negative (-1 stays: it is the frameworks' "off / auto", e.g.
sglang's --chunked-prefill-size -1); fractions and utilizations lie in (0, 1].
"""
from __future__ import annotations

import math
import re

FRACTION = re.compile(r"fraction|utilization|-ratio$", re.I)
INT_MAX = 2**40  # beyond any token count, batch or cache size a server takes


def problem(spec, value) -> str | None:
    """Why `value` (already parsed to the flag's type) is not sane for `spec`; None if it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if FRACTION.search(spec.name):
        return None if 0 < value <= 1 else f"{value!r} is outside (0, 1]: it is a fraction"
    if value < 0 and value != -1:  # -1 is the frameworks' "off / auto" (sglang --chunked-prefill-size -1)
        return f"{value!r} is negative; allowed: >= 0, or -1 for off/auto"
    if value > INT_MAX:
        return f"{value!r} is absurdly large; allowed: <= {INT_MAX}"
    return None
