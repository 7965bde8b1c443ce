"""``corral command run`` against the real API routes on loopback: it prints all of the
command's output, even when the terminal status overtakes the last log batch, and exits with
the command's own exit code, like ``docker run``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.domain.trial import TrialState
from corral.protocol.agent import AgentTrialState, LogBatch, LogLineIn, TrialStatus
from corral.services import agents as agent_service
from corral.services.kill import kill_experiment
from tests.services.harness import Cluster, Script

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


pytestmark = pytest.mark.usefixtures("api")  # the CLI against the API over ``cluster``


class Agent:
    """Plays the agent while the CLI waits: each time the CLI sleeps between polls, the next
    scripted step happens (no real time passes)."""

    def __init__(self, cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cluster = cluster
        self.steps: list[Callable[[], None]] = []
        self.polls = 0
        real_sleep = time.sleep
        main = threading.main_thread()

        def sleep(seconds: float) -> None:
            if threading.current_thread() is not main:
                real_sleep(seconds)
                return
            self.polls += 1
            if self.polls > 500:
                raise AssertionError("the CLI never stopped polling")
            if self.steps:
                self.steps.pop(0)()

        monkeypatch.setattr(time, "sleep", sleep)

    @property
    def trial_id(self) -> str:
        (trial,) = self.cluster.store.trials()
        return trial.id

    def _where(self) -> tuple[str, str]:
        (record,) = [i for i in self.cluster.instances() if i.cloud_id]
        assert record.cloud_id
        return record.id, record.cloud_id

    def start(self) -> None:
        self.cluster.scripts[self.trial_id] = Script(duration_s=10**6)
        for _ in range(60):
            self.cluster.pump()
            self.cluster.step(5)
            if self.cluster.trial(self.trial_id).state is TrialState.RUNNING:
                return
        raise AssertionError("the command never started")

    def status(self, state: AgentTrialState, exit_code: int | None, end: int | None) -> None:
        agent_id, cloud_id = self._where()
        for fake in self.cluster.agents.values():
            fake.running.pop(self.trial_id, None)
        agent_service.report_trial_status(
            self.cluster.ctx,
            agent_id,
            cloud_id,
            TrialStatus(trial_id=self.trial_id, state=state, exit_code=exit_code, log_end_seq=end),
        )

    def ship(self, *lines: str, first_seq: int = 1000) -> None:
        agent_id, cloud_id = self._where()
        batch = LogBatch(
            lines=[LogLineIn(seq=first_seq + n, at=1.0, line=line) for n, line in enumerate(lines)]
        )
        agent_service.append_logs(self.cluster.ctx, agent_id, cloud_id, self.trial_id, batch)


@pytest.fixture
def agent(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Agent:
    return Agent(cluster, monkeypatch)


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_output_shipped_after_the_terminal_status_is_still_printed(agent: Agent) -> None:
    agent.steps = [
        agent.start,
        # The agent's status overtook its last log batch: the lines come a poll later.
        lambda: agent.status(AgentTrialState.EXITED, 0, end=1000),
        lambda: agent.ship("hi"),
    ]
    result = cli("command", "run", "--", "echo", "hi")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["hi"]


def test_exits_with_the_commands_own_exit_code(agent: Agent, cluster: Cluster) -> None:
    agent.steps = [
        agent.start,
        lambda: agent.ship("before exit"),
        lambda: agent.status(AgentTrialState.EXITED, 3, end=1000),
    ]
    result = cli("command", "run", "--", "sh", "-c", "echo before exit; exit 3")
    assert result.exit_code == 3, result.output
    assert result.stdout.splitlines() == ["before exit"]
    assert "Traceback" not in result.output
    (experiment,) = cluster.store.experiments()
    assert experiment.config["entrypoint"] == ["sh", "-c", "echo before exit; exit 3"]


def test_the_documented_invocation_needs_no_double_dash(agent: Agent, cluster: Cluster) -> None:
    """examples/command.yaml: ``corral command run --config-file examples/command.yaml ls -l
    /second``: options before the command line are the CLI's, everything after is the
    command's (its own ``-l`` included)."""
    agent.steps = [
        agent.start,
        lambda: agent.ship("total 0"),
        lambda: agent.status(AgentTrialState.EXITED, 0, end=1000),
    ]
    config = str(EXAMPLES / "command.yaml")
    assert (
        "--config-file examples/command.yaml ls -l /second"
        in (EXAMPLES / "command.yaml").read_text()
    )
    result = cli("command", "run", "--config-file", config, "ls", "-l", "/second")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["total 0"]
    (experiment,) = cluster.store.experiments()
    assert experiment.config["entrypoint"] == ["ls", "-l", "/second"]
    assert experiment.config["bind_mounts"][0]["container_path"] == "/second"


def test_a_killed_command_exits_nonzero_with_one_line_why(agent: Agent, cluster: Cluster) -> None:

    def kill() -> None:
        (experiment,) = cluster.store.experiments()
        kill_experiment(cluster.ctx, experiment.id)

    agent.steps = [
        agent.start,
        lambda: agent.ship("working"),
        kill,
        lambda: agent.status(AgentTrialState.STOPPED, 143, end=1000),
    ]
    result = cli("command", "run", "--", "sleep", "1000")
    assert result.exit_code not in (0, 143), result.output
    assert result.stdout.splitlines() == ["working"]
    assert "Traceback" not in result.output
    why = [x for x in result.stderr.splitlines() if "CANCELLED" in x]
    assert len(why) == 1 and "killed by user" in why[0]


def test_output_that_never_arrives_does_not_hang_the_cli(agent: Agent) -> None:
    agent.steps = [agent.start, lambda: agent.status(AgentTrialState.EXITED, 0, end=1000)]
    result = cli("command", "run", "--", "echo", "lost")
    assert result.exit_code == 0, result.output
    assert "output" in result.stderr and "Traceback" not in result.output
    assert agent.polls < 500
