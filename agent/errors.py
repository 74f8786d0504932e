"""Re-export of tools.errors, where the errors live: tools/ and sandboxes/ sit below agent/ and
must not import it, so the shared error types are defined at the bottom and re-exported here for
the agent's own modules and for callers used to `agent.errors`."""
from tools.errors import BadInput, unknown

__all__ = ["BadInput", "unknown"]
