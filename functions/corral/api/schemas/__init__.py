"""Wire schemas shared by the control plane and the agent runtime (pydantic only)."""
