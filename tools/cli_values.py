"""Command-line values shared by the agent's commands and the grounds' own commands: a bad
value is a BadInput that names the flag and what it got (exit 2 in the CLI)."""
from __future__ import annotations

from tools.errors import BadInput


def positive_floats(text: str, what: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInput(f"{what} must be comma-separated numbers, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise BadInput(f"{what} must be positive numbers, got {text!r}")
    return vals
