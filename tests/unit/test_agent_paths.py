"""The agent protocol's paths, written once for the agent (``str.format``) and the API's
resolver (``route``: ``{name}`` -> ``<name>``)."""

from __future__ import annotations

from corral.protocol.agent_paths import HEARTBEAT, REGISTER, TRIAL_LOGS, TRIAL_STATUS, route


def test_the_resolver_and_the_agent_spell_the_same_paths() -> None:
    assert route(REGISTER) == "/agents/register"
    assert route(HEARTBEAT) == "/agents/<agent_id>/heartbeat"
    assert route(TRIAL_STATUS) == "/agents/<agent_id>/trials/<trial_id>/status"
    assert route(TRIAL_LOGS) == "/agents/<agent_id>/trials/<trial_id>/logs"
    filled = TRIAL_LOGS.format(agent_id="i-1", trial_id="t-2")
    assert filled == "/agents/i-1/trials/t-2/logs"
