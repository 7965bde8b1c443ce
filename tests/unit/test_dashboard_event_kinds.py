"""The dashboard's event-log filter offers every kind of event the control plane writes: a
kind missing from its list can never be filtered for (breaker_reset was, before this test)."""

from __future__ import annotations

import re
from pathlib import Path

from corral.domain.records import EventKind

VIEW = Path(__file__).resolve().parents[2] / "functions/corral/api/dashboard/view_events.js"


def test_the_event_filter_lists_every_event_kind() -> None:
    source = VIEW.read_text()
    block = re.search(r"const KINDS = \[(.*?)\];", source, re.S)
    assert block is not None, "view_events.js has no KINDS list"
    listed = re.findall(r'"([a-z_]+)"', block.group(1))
    assert sorted(listed) == sorted(k.value for k in EventKind)
    assert len(listed) == len(set(listed))
