"""Run a trial as a local process group: for machines without Docker and the local stack.

The trial gets its own session (process group) so SIGTERM reaches the launcher *and* the
workers it forked (torchrun, data loaders), and so a signal to the agent's terminal does not.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

from agent_runtime.config import AgentConfig
from agent_runtime.executors import LaunchSpec, LineSink
from agent_runtime.trial_credentials import SHADOWING_ENV, Grant

# The agent's own settings (the dev token among them) never leak into a trial.
_PRIVATE_PREFIXES = ("CORRAL_AGENT_",)


PID_FILE = "pid"  # in the trial's work dir while its process group may be alive


class ProcessHandle:
    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        readers: list[threading.Thread],
        pid_file: Path | None = None,
    ) -> None:
        self._proc = proc
        self._readers = readers
        self._pid_file = pid_file

    @property
    def pid(self) -> int:
        return self._proc.pid

    def poll(self) -> int | None:
        code = self._proc.poll()
        if code is None:
            return None
        # Let the readers drain the pipes so the last lines (often the error) are not lost.
        for reader in self._readers:
            reader.join(timeout=2.0)
        return 128 - code if code < 0 else code  # -N (killed by N) -> 128+N, as shells say

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.killpg(self._proc.pid, sig)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def cleanup(self) -> None:
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()
        if self._pid_file is not None:
            self._pid_file.unlink(missing_ok=True)


class ProcessExecutor:
    name = "process"
    in_container = False

    def __init__(self, config: AgentConfig, sleep: Callable[[float], None] = time.sleep) -> None:
        self._config = config
        self._sleep = sleep

    def stop_leftovers(self, grace_s: float) -> list[str]:
        """Process groups recorded in ``trials/*/pid`` by an earlier agent process, checked
        to still be that trial's (its environment names the trial id; pids are reused)."""
        stopped: list[str] = []
        groups: dict[str, int] = {}
        for pid_file in sorted((self._config.work_dir / "trials").glob(f"*/{PID_FILE}")):
            trial_id = pid_file.parent.name
            pid = _read_pid(pid_file)
            if pid is not None and _runs_trial(pid, trial_id):
                groups[trial_id] = pid
            else:
                pid_file.unlink(missing_ok=True)
        for pid in groups.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        waited = 0.0
        while any(_alive(p) for p in groups.values()) and waited < grace_s:
            self._sleep(0.2)
            waited += 0.2
        for trial_id, pid in groups.items():
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            (self._config.work_dir / "trials" / trial_id / PID_FILE).unlink(missing_ok=True)
            stopped.append(trial_id)
        return stopped

    def launch(self, spec: LaunchSpec, on_line: LineSink) -> ProcessHandle:
        for mount in spec.bind_mounts:
            # No container, so nothing to mount into: say so in the trial's own output
            # rather than let the path be missing without a word.
            on_line(
                "stderr",
                f"corral: bind mount {mount.host_path} -> {mount.container_path} not applied: "
                "this agent runs trials as processes (bind mounts need the docker executor)",
            )
        spec.work_dir.mkdir(parents=True, exist_ok=True)
        spec.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        env = process_env(os.environ, spec.env, spec.credentials)
        if spec.uid is not None or spec.gid is not None:
            # The trial must be able to write its scratch and checkpoint directories.
            owned = [spec.work_dir, spec.checkpoint_dir]
            owned += [spec.metrics_dir] if spec.metrics_dir is not None else []
            for path in owned:
                os.chown(
                    path,
                    spec.uid if spec.uid is not None else -1,
                    spec.gid if spec.gid is not None else -1,
                )
        proc = subprocess.Popen(
            spec.command,
            cwd=spec.work_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            # Drop the agent's supplementary groups too when switching user.
            user=spec.uid,
            group=spec.gid,
            extra_groups=[] if spec.uid is not None or spec.gid is not None else None,
        )
        readers = [
            threading.Thread(
                target=_pump,
                args=(stream, name, on_line),
                name=f"log-{spec.trial_id}-{name}",
                daemon=True,
            )
            for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr"))
            if stream is not None
        ]
        for reader in readers:
            reader.start()
        pid_file = spec.work_dir / PID_FILE
        pid_file.write_text(str(proc.pid))
        return ProcessHandle(proc, readers, pid_file)


def process_env(
    host: Mapping[str, str], trial: Mapping[str, str], credentials: Grant | None = None
) -> dict[str, str]:
    """A process trial's environment: the host's (minus the agent's own settings) under the
    trial's. The trial's ``PYTHONPATH`` (the corral_trial helper first) goes in front of the
    host's instead of replacing it, so what the host put on the path stays importable.
    With ``credentials``, the trial's own (loopback URI) replace whatever AWS credentials
    the agent's environment holds: SDKs read environment variables before the endpoint."""
    shadowing = set(SHADOWING_ENV) if credentials is not None else set()
    env = {
        k: v for k, v in host.items() if not k.startswith(_PRIVATE_PREFIXES) and k not in shadowing
    }
    if credentials is not None:
        env.update(credentials.env("loopback"))
    env.update(trial)
    if trial.get("PYTHONPATH") and host.get("PYTHONPATH"):
        env["PYTHONPATH"] = f"{trial['PYTHONPATH']}:{host['PYTHONPATH']}"
    return env


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _runs_trial(pid: int, trial_id: str) -> bool:
    """The process is alive and is the trial's: never signal a stranger that got the pid."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"CORRAL_TRIAL_ID={trial_id}".encode() in environ.split(b"\0") and _alive(pid)


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for its (old) parent to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _pump(stream: IO[bytes], name: str, on_line: LineSink) -> None:
    try:
        for raw in iter(stream.readline, b""):
            on_line(name, raw.decode("utf-8", errors="replace").rstrip("\r\n"))
    except (OSError, ValueError):
        pass  # the pipe was closed under us by cleanup(): nothing left to read
