"""Port ranges as the cluster config writes them and the agent passes them to trials
(``GLOO_PORT_RANGE``, ``NCCL_PORT_RANGE``). Standard library only: both the control plane's
config and the agent check values with it, and the agent imports nothing else of Corral but
this package."""

from __future__ import annotations

import re

PORT_MIN = 1024  # below this needs root: trial processes need not run as root
PORT_MAX = 65535
_RANGE = re.compile(r"^\s*(\d{1,5})\s*[:-]\s*(\d{1,5})\s*$")


def parse_port_range(value: str) -> tuple[int, int]:
    """``"LOW:HIGH"`` (Determined's spelling) or ``"LOW-HIGH"`` -> (low, high); ValueError
    saying what is wrong otherwise."""
    match = _RANGE.match(value)
    if not match:
        raise ValueError(f"must be a port range LOW:HIGH (or LOW-HIGH), got {value!r}")
    low, high = int(match.group(1)), int(match.group(2))
    if not PORT_MIN <= low <= high <= PORT_MAX:
        raise ValueError(f"must satisfy {PORT_MIN} <= LOW <= HIGH <= {PORT_MAX}, got {low}:{high}")
    return low, high
