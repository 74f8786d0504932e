"""Command-line values shared by the agent's commands and the grounds' own commands: a bad
value is a BadInput that names the flag and what it got (exit 2 in the CLI)."""
from __future__ import annotations

import math

from tools.errors import BadInput

MAX_RATE = 1e6  # requests/s: far past any node; a larger number is a typo, not a workload


def positive_floats(text: str, what: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInput(f"{what} must be comma-separated numbers, got {text!r}") from None
    bad = [v for v in vals if not (math.isfinite(v) and 0 < v <= MAX_RATE)]  # nan fails every comparison
    if not vals or bad:
        raise BadInput(f"{what} must be positive numbers <= {MAX_RATE:g}, got {text!r}"
                       + (f" ({bad[0]!r} is not)" if bad else ""))
    return vals


def images(specs: list[str] | None) -> dict[str, str]:
    """`--image FRAMEWORK=IMAGE`, repeatable (the docker backend) -> {framework: image}."""
    from tools.frameworks import NAMES
    out: dict[str, str] = {}
    for spec in specs or []:
        fw, sep, image = spec.partition("=")
        if not sep or not image.strip():
            raise BadInput(f"--image {spec!r}: give FRAMEWORK=IMAGE, e.g. --image vllm=rocm/vllm:latest")
        if fw not in NAMES:
            raise BadInput(f"--image {spec!r}: unknown framework {fw!r}; allowed: {', '.join(NAMES)}")
        if fw in out:
            raise BadInput(f"--image {fw}= given twice ({out[fw]} and {image}); give one image per framework")
        out[fw] = image.strip()
    return out
