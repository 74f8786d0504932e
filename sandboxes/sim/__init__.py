"""The simulated GPU node: `SimSandbox(model, hw, seed=...)` implements tools.protocols.Sandbox."""
from sandboxes.sim.sandbox import SimClient, SimSandbox, SimServer

__all__ = ["SimSandbox", "SimServer", "SimClient"]
