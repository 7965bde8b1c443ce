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
from typing import IO

from agent_runtime.config import AgentConfig
from agent_runtime.executors import LaunchSpec, LineSink

# The agent's own settings (the dev token among them) never leak into a trial.
_PRIVATE_PREFIXES = ("CORRAL_AGENT_",)


class ProcessHandle:
    def __init__(self, proc: subprocess.Popen[bytes], readers: list[threading.Thread]) -> None:
        self._proc = proc
        self._readers = readers

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


class ProcessExecutor:
    name = "process"
    in_container = False

    def __init__(self, config: AgentConfig) -> None:
        self._config = config

    def launch(self, spec: LaunchSpec, on_line: LineSink) -> ProcessHandle:
        spec.work_dir.mkdir(parents=True, exist_ok=True)
        spec.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        base = {k: v for k, v in os.environ.items() if not k.startswith(_PRIVATE_PREFIXES)}
        env = {**base, **spec.env}
        if spec.uid is not None or spec.gid is not None:
            # The trial must be able to write its scratch and checkpoint directories.
            for path in (spec.work_dir, spec.checkpoint_dir):
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
        return ProcessHandle(proc, readers)


def _pump(stream: IO[bytes], name: str, on_line: LineSink) -> None:
    try:
        for raw in iter(stream.readline, b""):
            on_line(name, raw.decode("utf-8", errors="replace").rstrip("\r\n"))
    except (OSError, ValueError):
        pass  # the pipe was closed under us by cleanup(): nothing left to read
