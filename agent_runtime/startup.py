"""``container_startup_script``: run on the host, once per boot, before the first image pull.

Determined runs it in its agent's container as the agent starts; the seeds' example installs
``docker-credential-gcr`` and runs ``docker-credential-gcr configure-docker``, which writes the
registry's credential helper into the Docker client config that pulls trial images. Corral's
agent runs on the host and pulls with the Docker SDK, which reads that config when its client
is made: so the script runs here, before the executor (and its client) exists, not inside each
trial after the pull it was meant to enable.

Once per boot: a marker in ``run_dir`` (``/run/corral``, a tmpfs emptied at every boot) names
the script's digest, so an agent systemd restarts does not run an ``apt-get`` again, and a
stopped instance started again (warm pool) does. A failing script makes the agent unhealthy:
it reports that and exits without registering (pulls would fail on every trial), and the
control plane replaces the instance.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from agent_runtime.config import AgentConfig
from agent_runtime.gpus import Unhealthy

log = logging.getLogger(__name__)

TIMEOUT_S = 1800.0  # package installs behind a slow proxy; past this the boot is hopeless
MARKER = "container_startup_script.done"

# (argv, environment, timeout) -> (exit code, combined output)
Runner = Callable[[list[str], Mapping[str, str], float], tuple[int, str]]


def _run(argv: list[str], env: Mapping[str, str], timeout_s: float) -> tuple[int, str]:
    try:
        done = subprocess.run(
            argv,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout_s:.0f} s"
    return done.returncode, done.stdout.decode("utf-8", errors="replace")


def run_container_startup_script(config: AgentConfig, runner: Runner = _run) -> bool:
    """Run the script if this boot has not; True when it ran now. Raises ``Unhealthy`` when
    it fails, with its exit code and the last lines it printed."""
    script = config.container_startup_script
    if not script:
        return False
    digest = hashlib.sha256(script.encode()).hexdigest()
    marker = config.run_dir / MARKER
    if _read(marker) == digest:
        log.info("container_startup_script already ran this boot")
        return False
    env = {**os.environ, **config.proxy_env()}
    env = {k: v for k, v in env.items() if not k.startswith("CORRAL_AGENT_")}
    log.info("running container_startup_script on the host (before any image pull)")
    code, output = runner(["/bin/bash", "-c", script], env, TIMEOUT_S)
    for line in output.splitlines()[-200:]:
        log.info("container_startup_script: %s", line)
    if code != 0:
        tail = " | ".join(output.strip().splitlines()[-3:])
        raise Unhealthy(
            f"unhealthy: container_startup_script failed with exit code {code}"
            + (f": {tail}" if tail else "")
            + "; not registering"
        )
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(digest)
    return True


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
