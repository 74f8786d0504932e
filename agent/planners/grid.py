"""The numbers a person would type: the grid numeric flag search works on.

No engineer deploys `--mem-fraction-static 0.8372033759818311` or `--max-prefill-tokens 21784`, and
the frameworks round token budgets to their own block sizes anyway, so the search is asked only for
values on a human grid and every value it proposes is one to put in a launch script as is:
- floats: a step of one hundredth of the order of magnitude of the range (0.70..0.95 -> 0.01);
- log-scaled integers (token budgets, batch sizes): powers of two;
- other integers: small ones as they are, large ones on a 1-2-5 step.
`Dim` carries an Optuna distribution plus the map between its internal value and the flag's value
(an index into the powers of two, for example), so TPE still sees an ordered axis.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution

SMALL_INT = 64  # integers up to here are counts (draft tokens, steps) and stay as they are


@dataclass(frozen=True)
class Dim:
    dist: BaseDistribution
    values: tuple | None = None  # the grid by index (dist is then an index); None: dist's own values
    digits: int | None = None  # floats: decimals to round Optuna's step arithmetic back to

    def decode(self, internal):
        if self.values is not None:
            return self.values[int(internal)]
        return round(float(internal), self.digits) if self.digits is not None else internal

    def encode(self, value):
        """A flag value -> the distribution's value (the nearest grid point); None when it is not a number."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if self.values is not None:
            return min(range(len(self.values)), key=lambda i: (_dist(self.values[i], value), i))
        step = getattr(self.dist, "step", None)
        if isinstance(self.dist, FloatDistribution) and step:  # onto the step grid, inside the range
            x = min(max(float(value), self.dist.low), self.dist.high)
            return round(self.dist.low + round((x - self.dist.low) / step) * step, self.digits)
        return value


def _dist(a: float, b: float) -> float:
    return abs(math.log(a) - math.log(b)) if a > 0 and b > 0 else abs(a - b)


def float_step(low: float, high: float) -> float:
    """One hundredth of the range's order of magnitude: 0.70..0.95 -> 0.01, 1..50 -> 0.1."""
    return 10.0 ** (math.floor(math.log10(high - low)) - 1) if high > low else 1.0


def nice_step(span: float, points: int = 20) -> int:
    """The 1-2-5 step that puts at most about `points` values on `span`."""
    raw = span / points
    mag = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    return int(next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw))


def powers_of_two(low: int, high: int) -> tuple[int, ...]:
    return tuple(2 ** k for k in range(math.ceil(math.log2(max(low, 1))), math.floor(math.log2(high)) + 1))


def dim(kind: str, low, high, log: bool = False) -> Dim:
    """The human grid for one numeric search spec: kind 'float' or 'int'."""
    if kind == "float":
        step = float_step(low, high)
        digits = max(0, -math.floor(math.log10(step)))
        lo, hi = math.ceil(low / step - 1e-9) * step, math.floor(high / step + 1e-9) * step
        return Dim(FloatDistribution(round(lo, digits), round(hi, digits), step=step), digits=digits)
    low, high = int(low), int(high)
    if high <= SMALL_INT:
        return Dim(IntDistribution(low, high))
    if log:
        grid = powers_of_two(low, high)
        if len(grid) >= 2:
            return Dim(IntDistribution(0, len(grid) - 1), values=grid)
    step = nice_step(high - low)
    lo = math.ceil(low / step) * step
    grid = ((low,) if low < lo and is_human(low) else ()) + tuple(range(lo, high + 1, step))
    return Dim(IntDistribution(0, len(grid) - 1), values=grid)


def snap(value, d: Dim):
    """The grid value nearest to `value` (a non-number is returned as it is)."""
    internal = d.encode(value)
    if internal is None:
        return value
    if d.values is not None or isinstance(d.dist, FloatDistribution):
        return d.decode(internal)
    return min(max(int(round(value)), d.dist.low), d.dist.high)


def is_human(value) -> bool:
    """What a person would type: a non-number, a small or power-of-two or 1-2-5-rounded integer,
    a float with at most two significant decimals."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    if isinstance(value, float) and not value.is_integer():
        return round(value, 2) == value
    v = abs(int(value))
    if v <= SMALL_INT or v & (v - 1) == 0:
        return True
    mag = 10 ** (len(str(v)) - 2)  # two significant figures: 21784 is not, 22000 is
    return v % mag == 0


def snap_flags(flags: dict, specs: dict) -> dict:
    """Numeric flags with a search range (FlagSpec.search low/high) moved to their human grid;
    other flags as given. For proposals made outside the search (the LLM planner's)."""
    from tools.frameworks.base import INT_TYPES
    out = dict(flags)
    for k, v in flags.items():
        s = specs.get(k)
        sr = (s.search or {}) if s is not None else {}
        if "low" in sr and s.type in (*INT_TYPES, "float"):
            out[k] = snap(v, dim("float" if s.type == "float" else "int", sr["low"], sr["high"], bool(sr.get("log"))))
    return out
