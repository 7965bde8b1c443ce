"""Executors start a trial and hand back a handle the agent polls and signals.

``process`` runs the entrypoint as a local process group (machines without Docker, and the
local stack); ``docker`` runs it in a container on the assigned GPUs. ``auto`` picks Docker
when the SDK imports and the engine answers, else processes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent_runtime.config import AgentConfig
from agent_runtime.trial_credentials import Grant
from corral.protocol.agent import BindMount, RegistryAuth

log = logging.getLogger(__name__)

# Called from reader threads with (stream, line); must be thread-safe.
LineSink = Callable[[str, str], None]


@dataclass(frozen=True)
class LaunchSpec:
    trial_id: str
    experiment_id: str
    agent_id: str
    command: list[str]
    env: dict[str, str]
    gpus: list[int]
    work_dir: Path  # per-trial scratch directory on the host (cwd of a process trial)
    checkpoint_dir: Path  # host path, mounted at the same path in a container
    metrics_dir: Path | None = None  # holds CORRAL_METRICS_FILE; mounted like checkpoints
    image: str | None = None
    bind_mounts: list[BindMount] = field(default_factory=list)
    uid: int | None = None
    gid: int | None = None
    # The trial's own registry credentials (its experiment's); None: the pool's, if any.
    registry_auth: RegistryAuth | None = None
    # Agents the trial spans (its rendezvous' nnodes): more than one needs the host network.
    nodes: int = 1
    # The trial's own cloud credentials (trial_credentials.py); the executor picks the URI
    # its network reaches. None: the trial gets no credentials from the agent.
    credentials: Grant | None = None


class TrialHandle(Protocol):
    def poll(self) -> int | None:
        """The exit code once the trial ended (128+N for death by signal N), else None."""

    def terminate(self) -> None:
        """Ask the trial to checkpoint and exit (SIGTERM)."""

    def kill(self) -> None:
        """SIGKILL: the grace period is over."""

    def cleanup(self) -> None:
        """Release what the run held (container, pipes) after the exit was reported."""


class Executor(Protocol):
    name: str
    in_container: bool

    def launch(self, spec: LaunchSpec, on_line: LineSink) -> TrialHandle:
        """Start the trial; may block (an image pull): the agent calls it off the loop."""

    def stop_leftovers(self, grace_s: float) -> list[str]:
        """Stop the trials a previous agent process on this machine left running (systemd
        restarted the agent): SIGTERM, so they checkpoint, then SIGKILL after ``grace_s``.
        Returns their trial ids; the agent hands them back to the control plane, which
        requeues them to resume from their checkpoints."""


def make_executor(config: AgentConfig) -> Executor:
    from agent_runtime.executors.process import ProcessExecutor

    if config.executor == "process":
        return ProcessExecutor(config)
    from agent_runtime.executors.docker import DockerExecutor, docker_client

    if config.executor == "docker":
        return DockerExecutor(config, docker_client())
    try:
        return DockerExecutor(config, docker_client())
    except Exception as exc:  # no SDK, no engine, no permission: all mean "use processes"
        log.info("Docker unavailable (%s); trials run as local processes", exc)
        return ProcessExecutor(config)
