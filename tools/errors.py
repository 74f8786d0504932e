"""Errors the CLI turns into a one-line message and exit code 2 (bad input), never a traceback.

They live at the bottom of the import graph (tools/) so every layer can raise them: tools/ and
sandboxes/ import this module, never agent/ (agent.errors re-exports it)."""


class BadInput(ValueError):
    """The user gave a value we cannot use. The message names the bad value and what is allowed."""


def unknown(kind: str, value: object, allowed) -> BadInput:
    """The standard wording for 'not one of the allowed values'."""
    return BadInput(f"unknown {kind} {value!r}; allowed: {', '.join(sorted(map(str, allowed)))}")
