"""Run a rendered bootstrap script the way an instance would, but dry: in a scratch root,
with a preinstalled `corral-agent` (as the machine image has) that does nothing, so the
script's own logic runs and nothing is installed or started. Shared by the bootstrap tests
and the hostile-input tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def run_bootstrap(
    script: str, root: Path, timeout_s: float = 20
) -> subprocess.CompletedProcess[bytes]:
    path = root / "user-data.sh"
    path.write_bytes(script.encode())
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "corral-agent").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "corral-agent").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CORRAL_BOOTSTRAP_ROOT": str(root),
        "CORRAL_BOOTSTRAP_DRY_RUN": "1",
    }
    # Bytes, not text: text mode would turn a "\r" in a value into "\n".
    return subprocess.run(
        ["bash", str(path)], capture_output=True, env=env, timeout=timeout_s, check=False
    )
