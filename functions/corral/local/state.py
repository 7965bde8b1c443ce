"""The local stack's state directory (``.corral/dev/`` by default, ``CORRAL_DEV_DIR`` overrides).

Everything another process needs to find or stop the stack lives here as small text files,
so the CLI (``corral experiment ...``, ``corral dev down``) works from any shell:

```
stack.pid        the stack process (foreground or --detach)
endpoint         the API URL (http://127.0.0.1:PORT)
aws_endpoint     the moto URL (AWS_ENDPOINT_URL for boto3)
token            the bearer token of the stack's default user (``local``)
users.json       the stack's named users (name and token digest each; ``users.py``)
agent_secret     the key agent tokens are derived from (see ``tokens.py``)
children         pid per line of every process the stack started (moto, agents, trials)
faults.json      injected faults (capacity errors, pending terminations), read by the stack
logs/            stack.log, moto.log, one log per agent
agents/<id>/     each agent's config, work dir and interruption notice file
```
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATE_ENV = "CORRAL_DEV_DIR"
DEFAULT_DIR = Path(".corral") / "dev"


def default_state_dir() -> Path:
    return Path(os.environ.get(STATE_ENV) or DEFAULT_DIR).absolute()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) still answers kill(0): look closer.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


class _InRoot:
    """A file or directory below the state directory, read as an attribute of it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, state: StateDir, owner: type[StateDir] | None = None) -> Path:
        return state.root / self.name


@dataclass(frozen=True)
class StateDir:
    root: Path

    @classmethod
    def default(cls) -> StateDir:
        return cls(default_state_dir())

    # ---- paths (the files the module docstring lists) -----------------------------------
    pid_file = _InRoot("stack.pid")
    endpoint_file = _InRoot("endpoint")
    aws_endpoint_file = _InRoot("aws_endpoint")
    token_file = _InRoot("token")
    users_file = _InRoot("users.json")
    agent_secret_file = _InRoot("agent_secret")
    children_file = _InRoot("children")
    faults_file = _InRoot("faults.json")
    logs = _InRoot("logs")

    def agent_dir(self, instance_id: str) -> Path:
        return self.root / "agents" / instance_id

    def notice_file(self, instance_id: str) -> Path:
        return self.agent_dir(instance_id) / "notice"

    def rebalance_file(self, instance_id: str) -> Path:
        return self.agent_dir(instance_id) / "rebalance"

    # ---- small files -------------------------------------------------------------------
    def prepare(self) -> None:
        for path in (self.root, self.logs, self.root / "agents"):
            path.mkdir(parents=True, exist_ok=True)

    def write(self, path: Path, text: str) -> None:
        """Atomic: a reader never sees half a file (the CLI polls these while we write)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)

    def read(self, path: Path) -> str | None:
        try:
            return path.read_text().strip() or None
        except OSError:
            return None

    def stack_pid(self) -> int | None:
        text = self.read(self.pid_file)
        return int(text) if text and text.isdigit() else None

    def running_pid(self) -> int | None:
        """The stack's pid if that process is alive."""
        pid = self.stack_pid()
        return pid if pid is not None and pid_alive(pid) else None

    def endpoint(self) -> str | None:
        return self.read(self.endpoint_file)

    def aws_endpoint(self) -> str | None:
        return self.read(self.aws_endpoint_file)

    def token(self) -> str | None:
        return self.read(self.token_file)

    # ---- child processes ---------------------------------------------------------------
    def add_child(self, pid: int) -> None:
        with self._locked(), self.children_file.open("a") as out:
            out.write(f"{pid}\n")

    def remove_child(self, pid: int) -> None:
        with self._locked():
            kept = [p for p in self.children() if p != pid]
            self.write(self.children_file, "".join(f"{p}\n" for p in kept))

    def children(self) -> list[int]:
        text = self.read(self.children_file) or ""
        return [int(line) for line in text.split() if line.isdigit()]

    def clear_runtime_files(self) -> None:
        """What only makes sense while the stack runs; logs and agent dirs stay for reading."""
        for path in (
            self.pid_file,
            self.endpoint_file,
            self.aws_endpoint_file,
            self.children_file,
            self.faults_file,
        ):
            path.unlink(missing_ok=True)

    # ---- read-modify-write from the CLI and the stack (faults, users) --------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Held while a small file is read, changed and written back."""
        with self._locked():
            yield

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read_faults(self) -> dict[str, Any]:
        text = self.read(self.faults_file)
        if not text:
            return {}
        try:
            data = json.loads(text)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    @contextlib.contextmanager
    def edit_faults(self) -> Iterator[dict[str, Any]]:
        with self._locked():
            data = self.read_faults()
            yield data
            self.write(self.faults_file, json.dumps(data, indent=2, sort_keys=True))
