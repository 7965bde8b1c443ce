"""The agent the local stack's machines run: what their image has at ``/opt/corral-agent``.

``developer_agent``: a ``bin/corral-agent`` that runs this checkout's agent with the stack's
own interpreter.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def developer_agent(directory: Path) -> Path:
    """An install whose ``bin/corral-agent`` runs ``agent_runtime.main`` from the stack's
    interpreter and path (the developer's venv)."""
    script = directory / "bin" / "corral-agent"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m agent_runtime.main "$@"\n')
    script.chmod(0o755)
    return directory
