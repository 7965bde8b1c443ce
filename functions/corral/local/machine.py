"""One emulated machine: its disk (a root directory), what its image put there, and the boot
that runs its user data there.

The disk holds what the agent image (``infra/agent-image``) installs: the agent under
``/opt/corral-agent`` (here a link to the local stack's agent install) and, as the
machine's "hardware", an ``nvidia-smi`` that reports the instance type's GPUs (fake ones: the
agent finds them the way it finds real ones). The boot runs the user data in a session of its
own with ``CORRAL_BOOTSTRAP_ROOT`` set to the disk, so the bootstrap writes its config under
it and starts the agent from it (with nohup: there is no systemd in the disk). Everything the
boot starts stays in that session, except trials (the agent gives each a session of its
own, as its children): powering the machine off kills every member of the session with its
descendants.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from corral.local.proctree import session_members, stop_tree
from corral.local.state import pid_alive

log = logging.getLogger(__name__)

AGENT_HOME = "opt/corral-agent"  # infra/agent-image/scripts/install-agent.sh's VENV
AGENT_PID_FILE = "run/corral-agent.pid"  # the bootstrap's nohup start writes it
AGENT_LOG = "var/log/corral-agent.log"

# What nvidia-smi answers for the queries the agent makes (agent_runtime/gpus.py), one line
# per GPU: fake GPUs, idle.
_NVIDIA_SMI = """#!/bin/sh
# The emulated machine's GPUs (corral.local.machine): @@GPUS@@ idle fake GPUs.
query=""
for arg in "$@"; do
  case "$arg" in --query-gpu=*) query="${arg#--query-gpu=}" ;; esac
done
[ -n "$query" ] || { echo "emulated nvidia-smi: only --query-gpu is supported" >&2; exit 2; }
i=0
while [ "$i" -lt @@GPUS@@ ]; do
  line=""
  for field in $(echo "$query" | tr ',' ' '); do
    case "$field" in
      index) value="$i" ;;
      uuid) value="GPU-emulated-$(printf %04d "$i")" ;;
      name) value="Emulated GPU" ;;
      memory.total) value=16384 ;;
      *) value=0 ;;
    esac
    line="${line:+$line, }$value"
  done
  echo "$line"
  i=$((i + 1))
done
"""


def install_image(root: Path, agent_home: Path, gpus: int) -> None:
    """Lay the image and the hardware on a fresh disk (kept as they are on a disk that was
    booted before: a stopped instance keeps its disk)."""
    link = root / AGENT_HOME
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists() and not link.is_symlink():
        link.symlink_to(agent_home.resolve(), target_is_directory=True)
    smi = root / "usr/bin/nvidia-smi"
    if gpus > 0 and not smi.exists():
        smi.parent.mkdir(parents=True, exist_ok=True)
        smi.write_text(_NVIDIA_SMI.replace("@@GPUS@@", str(int(gpus))))
        smi.chmod(0o755)
    (root / "root").mkdir(exist_ok=True)  # the boot's HOME: never the developer's ~/.aws


def boot_env(
    base: dict[str, str], root: Path, metadata_url: str, aws_endpoint: str | None = None
) -> dict[str, str]:
    """The boot's environment: the developer's (minus secrets, see stack.py), on this disk."""
    bins = [str(root / "usr/local/bin"), str(root / "usr/bin"), base.get("PATH", "")]
    path = os.pathsep.join(bins)
    env = {
        **base,
        "PATH": path,
        "HOME": str(root / "root"),
        "CORRAL_BOOTSTRAP_ROOT": str(root),
        # The metadata service is the machine's: the agent's identity and botocore's role
        # credentials come from it (agent_runtime.config.EC2_METADATA_ENV).
        "AWS_EC2_METADATA_SERVICE_ENDPOINT": metadata_url,
    }
    if aws_endpoint:
        # The machine's network: where an instance reaches the regional AWS endpoints, this
        # one reaches the stack's moto server (botocore honours the variable for every
        # service), so the agent's CloudWatch metrics land there, signed with the role's
        # credentials from the metadata service. The network, not the agent's config: the
        # user data is the one a real launch gets.
        env["AWS_ENDPOINT_URL"] = aws_endpoint
    return env


@dataclass
class Boot:
    """The processes of one power-on: the user data's run and what it started."""

    instance_id: str
    root: Path
    proc: subprocess.Popen[bytes]  # the user data's shell: the session leader
    exit_code: int | None = None  # the agent's, once it quit on its own (-1: unknown)

    @property
    def sid(self) -> int:
        return self.proc.pid

    def agent_pid(self) -> int | None:
        try:
            text = (self.root / AGENT_PID_FILE).read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def running(self) -> bool:
        """Anything of the boot still runs (the user data, or the agent it started)."""
        if self.proc.poll() is None:
            return True
        self._reap_agent()
        return bool(session_members(self.sid))

    def _reap_agent(self) -> None:
        """The agent's exit code when the stack (a child subreaper) inherited it."""
        pid = self.agent_pid()
        if pid is None or self.exit_code is not None:
            return
        with contextlib.suppress(ChildProcessError):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                self.exit_code = os.waitstatus_to_exitcode(status)

    def kill(self, grace_s: float = 0.0) -> None:
        """Power off: every process of the session and its descendants (trials)."""
        pids = [self.proc.pid, *session_members(self.sid)]
        for pid in dict.fromkeys(pids):
            stop_tree(pid, grace_s=grace_s, graceful=grace_s > 0)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.sid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        # Powered off when nothing of it runs: SIGKILL is delivered, not yet acted on.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
            self._reap_agent()
            time.sleep(0.02)
        self._reap_agent()


def start_boot(
    instance_id: str, root: Path, user_data: bytes, env: dict[str, str], console: Path
) -> Boot:
    """Run the user data on the machine (as cloud-init runs a ``#!`` script, as root would:
    here as the developer), its output going to the console log."""
    script = root / "var/lib/cloud/instance/user-data.txt"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_bytes(user_data)
    script.chmod(0o700)
    (root / AGENT_PID_FILE).unlink(missing_ok=True)  # a previous power-on's
    with console.open("ab") as out:
        proc = subprocess.Popen(
            ["bash", str(script)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=root,
            env=env,
            start_new_session=True,  # the machine's processes: one session to power off
        )
    return Boot(instance_id, root, proc)


def delete_disk(root: Path, keep_logs: Path) -> None:
    """``DeleteOnTermination``: the disk goes; its logs are kept first (as the image's log
    forwarder would have shipped them) in ``keep_logs``."""
    logs = root / "var/log"
    if logs.is_dir():
        keep_logs.mkdir(parents=True, exist_ok=True)
        for path in logs.glob("*.log"):
            shutil.copyfile(path, keep_logs / path.name)
    shutil.rmtree(root, ignore_errors=True)
