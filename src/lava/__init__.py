"""lava: a stateless agent server speaking MAGMA agent protocol 2.0."""

__version__ = "0.1.0"

AGENT_ID = "lava"

__all__ = ["AGENT_ID", "__version__"]
