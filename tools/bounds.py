"""Bounds shared by the agent's settings and the grounds' own commands (agent.config, the sim's
`agent estimate`), and pydantic errors as one line naming the field, the rule and the value."""
from __future__ import annotations

from tools.errors import BadInput

SEED_MAX = 2**32 - 1  # numpy's seed range
TTFT_MAX_S = 3600.0  # a TTFT SLO beyond an hour is a typo


def validation_message(e, where: str = "", names: dict | None = None) -> str:
    """A pydantic ValidationError as one line naming the field (as `names` spells it for the user,
    e.g. a command's option), the rule and the value given."""
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    loc = (names or {}).get(loc, loc)
    got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
    return f"{where}{loc}: {err['msg']}{got}"


def build(model, where: str, names: dict | None = None, **fields):
    """`model(**fields)`, or BadInput naming the field, the allowed range and the value."""
    from pydantic import ValidationError
    try:
        return model(**fields)
    except ValidationError as e:
        raise BadInput(validation_message(e, where, names)) from None
