"""One run of one trial on this agent: launch (off the main loop, since pulling an image can
take minutes), state as the control plane should see it, graceful stop, exit code and the
latest checkpoint the trial declared."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from agent_runtime.config import AgentConfig
from agent_runtime.executors import Executor, LaunchSpec, LineSink, TrialHandle
from agent_runtime.trial_env import checkpoint_dir, read_latest, trial_env
from corral.protocol.agent import AgentTrialState, TrialAssignment, TrialStatus

log = logging.getLogger(__name__)

TERMINAL = frozenset({AgentTrialState.EXITED, AgentTrialState.PREEMPTED, AgentTrialState.STOPPED})
LAUNCH_FAILED_EXIT = 125  # what `docker run` says when the container could not be started


def launch_spec(
    a: TrialAssignment,
    config: AgentConfig,
    agent_id: str,
    in_container: bool,
    metrics_file: Path | None = None,
) -> LaunchSpec:
    """What to run for an assignment: the agent's defaults under the assignment's choices."""
    ckpt = checkpoint_dir(a, config.work_dir)
    env = trial_env(
        a,
        agent_id=agent_id,
        checkpoint_path=ckpt,
        proxies=config.proxy_env(),
        in_container=in_container,
        metrics_file=metrics_file,
        gloo_port_range=config.gloo_port_range,
        nccl_port_range=config.nccl_port_range,
    )
    return LaunchSpec(
        trial_id=a.trial_id,
        experiment_id=a.experiment_id,
        agent_id=agent_id,
        command=list(a.entrypoint),
        env=env,
        gpus=list(a.gpus),
        work_dir=config.work_dir / "trials" / a.trial_id,
        checkpoint_dir=ckpt,
        metrics_dir=metrics_file.parent if metrics_file else None,
        image=a.image,
        bind_mounts=list(a.bind_mounts),
        uid=a.run_as_uid if a.run_as_uid is not None else config.run_as_uid,
        gid=a.run_as_gid if a.run_as_gid is not None else config.run_as_gid,
        nodes=a.rendezvous.nnodes if a.rendezvous is not None else 1,
        registry_auth=a.registry_auth,
    )


class TrialRun:
    def __init__(
        self,
        assignment: TrialAssignment,
        spec: LaunchSpec,
        executor: Executor,
        on_line: LineSink,
    ) -> None:
        self.assignment = assignment
        self.spec = spec
        self.state = AgentTrialState.STARTING
        self.exit_code: int | None = None
        self.message: str | None = None
        self.acked: TrialStatus | None = None  # the last status the control plane accepted
        self.stop_as: AgentTrialState | None = None  # PREEMPTED or STOPPED once asked to stop
        self.log_end_seq: int | None = None  # set once terminal: the last log line's seq
        self._executor = executor
        self._on_line = on_line
        self._handle: TrialHandle | None = None
        self._launch_error: str | None = None
        self._launched = threading.Event()
        self._signalled = False
        self._killed = False
        self._kill_at: float | None = None

    @property
    def trial_id(self) -> str:
        return self.assignment.trial_id

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def start(self) -> None:
        threading.Thread(target=self._launch, name=f"launch-{self.trial_id}", daemon=True).start()

    def fail(self, message: str) -> None:
        """Refuse the assignment without running it (e.g. GPUs this agent does not have)."""
        self._launch_error = message
        self._launched.set()

    def _launch(self) -> None:
        try:
            self._handle = self._executor.launch(self.spec, self._on_line)
        except Exception as exc:
            log.exception("trial %s failed to start", self.trial_id)
            self._launch_error = f"{type(exc).__name__}: {exc}"
        finally:
            self._launched.set()

    def stop(self, as_state: AgentTrialState, grace_s: float, now: float) -> None:
        """SIGTERM now, SIGKILL after the grace period. A preemption outranks a plain stop,
        and a shorter deadline (a notice arriving during a stop) wins."""
        if self.terminal:
            return
        if self.stop_as is not AgentTrialState.PREEMPTED:
            self.stop_as = as_state
        deadline = now + grace_s
        self._kill_at = deadline if self._kill_at is None else min(self._kill_at, deadline)
        if self._handle is not None and not self._signalled:
            self._signalled = True
            self._handle.terminate()

    def poll(self, now: float) -> bool:
        """Advance the state; True if it changed (the control plane should hear of it)."""
        if self.terminal or not self._launched.is_set():
            return False
        before = self.state
        handle = self._handle
        if handle is None:
            self.state = self.stop_as or AgentTrialState.EXITED
            self.exit_code = None if self.stop_as else LAUNCH_FAILED_EXIT
            self.message = f"could not start: {self._launch_error}"
            return True
        if self.stop_as is not None and not self._signalled:
            self._signalled = True  # the stop came while the trial was still launching
            handle.terminate()
        code = handle.poll()
        if code is None:
            self.state = AgentTrialState.RUNNING
            if self._kill_at is not None and now >= self._kill_at and not self._killed:
                log.warning("trial %s ignored SIGTERM for its grace period: SIGKILL", self.trial_id)
                self._killed = True
                handle.kill()
            return self.state is not before
        self.exit_code = code
        self.state = self.stop_as or AgentTrialState.EXITED
        if self.stop_as is not None:
            self.message = (
                "killed after the grace period" if self._killed else "exited after SIGTERM"
            )
        return True

    def kill_now(self) -> None:
        """SIGKILL at once: the agent itself is going away without a grace period."""
        if self._handle is not None and not self.terminal:
            self._killed = True
            self._handle.kill()

    def status(self) -> TrialStatus:
        latest = read_latest(self.spec.checkpoint_dir) or self.assignment.checkpoint.latest
        return TrialStatus(
            trial_id=self.trial_id,
            state=self.state,
            exit_code=self.exit_code,
            latest_checkpoint=latest,
            message=self.message,
            log_end_seq=self.log_end_seq if self.terminal else None,
        )

    def cleanup(self) -> None:
        if self._handle is not None:
            self._handle.cleanup()
