"""Where the agent protocol's calls go: the paths the agent posts to and the API serves, written
once. Placeholders in braces (``{agent_id}``) are filled by the agent with ``str.format`` and
given to the API's resolver as ``<agent_id>`` (``route``)."""

from __future__ import annotations

import re

REGISTER = "/agents/register"
HEARTBEAT = "/agents/{agent_id}/heartbeat"
TRIAL_STATUS = "/agents/{agent_id}/trials/{trial_id}/status"
TRIAL_LOGS = "/agents/{agent_id}/trials/{trial_id}/logs"

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def route(path: str) -> str:
    """The resolver's spelling of ``path``: ``/agents/{agent_id}/heartbeat`` ->
    ``/agents/<agent_id>/heartbeat``."""
    return _PLACEHOLDER.sub(r"<\1>", path)
