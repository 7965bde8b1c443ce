"""The wire protocol: the contract between ``agent_runtime`` and the control plane.

``agent.py`` holds what an agent sends and what it gets back. The agent runtime, the
services that apply its calls and the API routes that carry them all import it from here;
it imports nothing but pydantic, so neither side depends on the other's internals.
"""
