"""The local stack's instance emulator against moto in-process: each instance boots from the
user data it was launched with, on a disk of its own; a stopped instance's processes die
with it and its disk stays, a start boots it again after the boot delay (the warm pool); a
terminated instance's disk is deleted.

The user data is the real bootstrap (``render_bootstrap``); the agent it starts is the
image's ``/opt/corral-agent/bin/corral-agent`` under the disk, here a script that records its
environment and sleeps (the emulator's part is under test, not the agent). ``tick(now=...)``
drives the emulator's time; only the processes' own start is waited for (bounded).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_runtime.config import AgentConfig
from agent_runtime.gpus import detect_gpus
from corral.bootstrap import BootstrapSettings, render_bootstrap
from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.local.credentials import CredentialStore
from corral.local.instance_emulator import (
    EmulatorSettings,
    InstanceEmulator,
    forget_previous_machines,
)
from corral.local.machine import Boot
from corral.local.state import StateDir, pid_alive
from tests.moto_env import ACCOUNT, REGION, use_moto_env

OWNERSHIP = ("managed-by", "corral-dev")
MOTO_ENDPOINT = "http://127.0.0.1:5999"  # the stack's moto server, as the machines reach AWS
BOOT_DELAY_S = 5.0
FAKE_AGENT = """#!/bin/sh
cd "$CORRAL_AGENT_WORK_DIR"
echo "$@" > args
env > env.tmp && mv env.tmp env
exec sleep 600
"""


@pytest.fixture
def emulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    """(an EC2 client on moto, an emulator watching it, its agents being FAKE_AGENT)."""
    boto3 = pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    use_moto_env(monkeypatch)
    install = tmp_path / "agent-install"
    (install / "bin").mkdir(parents=True)
    (install / "bin/corral-agent").write_text(FAKE_AGENT)
    (install / "bin/corral-agent").chmod(0o755)
    state = StateDir(tmp_path / "dev")
    state.prepare()
    settings = EmulatorSettings(
        ownership=(OWNERSHIP,),
        agent_home=install,
        credentials=CredentialStore(ACCOUNT),
        boot_delay_s=BOOT_DELAY_S,
        agent_env={"PATH": "/usr/bin:/bin", "SECRET_OF_THE_DEVELOPER": "x"},
        aws_endpoint=MOTO_ENDPOINT,
    )
    with moto.mock_aws():
        session = boto3.Session(region_name=REGION)
        emulator = InstanceEmulator(state, session, settings, threading.Event())
        try:
            yield session.client("ec2"), emulator
        finally:
            emulator.stop_all(grace_s=0.0)


def user_data(pool: str = "gpu") -> str:
    settings = BootstrapSettings(
        api_url="http://127.0.0.1:9",
        auth="aws",
        pool=pool,
        record_id="rec-1",
        expected_gpus=1,
        agent_settings={"executor": "process", "tick_s": 0.5},
    )
    return render_bootstrap(settings)


def run_instance(ec2: Any, script: str | None = None) -> str:
    image = ec2.register_image(Name="corral-agent", RootDeviceName="/dev/sda1")["ImageId"]
    tags = [
        {"Key": OWNERSHIP[0], "Value": OWNERSHIP[1]},
        {"Key": POOL_TAG, "Value": "gpu"},
        {"Key": RECORD_TAG, "Value": "rec-1"},
    ]
    reply = ec2.run_instances(
        ImageId=image,
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        UserData=script if script is not None else user_data(),
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return str(reply["Instances"][0]["InstanceId"])


def agent_pid(boot: Boot) -> int:
    """The agent the boot started (its pid file), once it wrote its environment."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pid = boot.agent_pid()
        if pid is not None and (boot.root / "var/lib/corral/env").exists():
            return pid
        time.sleep(0.05)  # real processes start in real time
    raise AssertionError(f"no agent started; boot log: {boot.root}")


def booted(emulator: InstanceEmulator, instance_id: str, now: float) -> Boot:
    """Tick through a boot starting at ``now``: nothing before the delay, a boot after it."""
    emulator.tick(now=now)
    assert instance_id not in emulator.agents
    emulator.tick(now=now + BOOT_DELAY_S)
    return emulator.agents[instance_id]


def test_the_agent_boots_from_the_user_data_on_the_instances_own_disk(
    emulated: tuple[Any, Any],
) -> None:
    ec2, emulator = emulated
    instance_id = run_instance(ec2)
    boot = booted(emulator, instance_id, now=0.0)
    pid = agent_pid(boot)
    disk = emulator.disk(instance_id)
    assert boot.root == disk

    # The config is the user data's, written under the disk; the emulator wrote none.
    config = json.loads((disk / "etc/corral/agent.yaml").read_text())
    assert config["auth"] == "aws" and config["pool"] == "gpu" and config["executor"] == "process"
    assert (disk / "var/lib/corral/args").read_text().split() == [
        "--config",
        str(disk / "etc/corral/agent.yaml"),
    ]
    assert [p.name for p in disk.rglob("agent.yaml")] == ["agent.yaml"]
    # The hardware: its metadata service and its GPUs; HOME is the disk's (never ~/.aws).
    env = dict(
        line.split("=", 1)
        for line in (disk / "var/lib/corral/env").read_text().splitlines()
        if "=" in line
    )
    assert env["AWS_EC2_METADATA_SERVICE_ENDPOINT"].startswith("http://127.0.0.1:")
    # ... its network, where AWS is the stack's moto server (the agent's CloudWatch metrics).
    assert env["AWS_ENDPOINT_URL"] == MOTO_ENDPOINT
    assert env["HOME"] == str(disk / "root")
    gpus = detect_gpus(
        AgentConfig(api_url="x", auth="aws", nvidia_smi=str(disk / "usr/bin/nvidia-smi"))
    )
    assert [g.index for g in gpus] == [0]  # a g5.xlarge has one GPU
    assert pid_alive(pid)


def test_a_terminated_instance_loses_its_processes_and_its_disk(
    emulated: tuple[Any, Any],
) -> None:
    ec2, emulator = emulated
    instance_id = run_instance(ec2)
    pid = agent_pid(booted(emulator, instance_id, now=0.0))
    disk = emulator.disk(instance_id)
    assert disk.is_dir()

    ec2.terminate_instances(InstanceIds=[instance_id])
    emulator.tick(now=10.0)
    assert instance_id not in emulator.agents
    assert not pid_alive(pid)
    assert not disk.exists()  # DeleteOnTermination
    assert not emulator._state.agent_dir(instance_id).exists()
    kept = emulator._state.logs / instance_id / "corral-bootstrap.log"
    assert "agent started" in kept.read_text()  # its logs were shipped first


def test_a_stopped_instance_keeps_its_disk_and_a_start_boots_it_again(
    emulated: tuple[Any, Any],
) -> None:
    ec2, emulator = emulated
    instance_id = run_instance(ec2)
    first = agent_pid(booted(emulator, instance_id, now=0.0))
    disk = emulator.disk(instance_id)
    (disk / "var/lib/corral/dataset-cache").write_text("kept")

    ec2.stop_instances(InstanceIds=[instance_id])
    emulator.tick(now=10.0)
    assert instance_id not in emulator.agents
    assert not pid_alive(first)  # killed, as a powered-off machine's processes are
    assert (disk / "var/lib/corral/dataset-cache").read_text() == "kept"

    (disk / "var/lib/corral/env").unlink()
    ec2.start_instances(InstanceIds=[instance_id])
    second = agent_pid(booted(emulator, instance_id, now=20.0))  # the boot delay again
    assert second != first and pid_alive(second)


def test_an_agent_that_quit_boots_again_after_a_stop_and_start(
    emulated: tuple[Any, Any],
) -> None:
    ec2, emulator = emulated
    instance_id = run_instance(ec2)
    first = agent_pid(booted(emulator, instance_id, now=0.0))
    os.kill(first, 9)
    deadline = time.monotonic() + 10
    while instance_id not in emulator.exited and time.monotonic() < deadline:
        emulator.tick(now=6.0)
        time.sleep(0.05)
    assert instance_id in emulator.exited
    emulator.tick(now=60.0)
    assert instance_id not in emulator.agents  # quit on its own: not restarted (as systemd)

    ec2.stop_instances(InstanceIds=[instance_id])
    emulator.tick(now=70.0)
    ec2.start_instances(InstanceIds=[instance_id])
    again = booted(emulator, instance_id, now=80.0)  # a reboot starts the service again
    assert pid_alive(agent_pid(again))


def test_a_failing_user_data_leaves_the_machine_up_without_an_agent(
    emulated: tuple[Any, Any],
) -> None:
    ec2, emulator = emulated
    instance_id = run_instance(ec2, "#!/bin/bash\necho no agent here >&2\nexit 7\n")
    emulator.tick(now=0.0)
    deadline = time.monotonic() + 10
    while instance_id not in emulator.exited and time.monotonic() < deadline:
        emulator.tick(now=6.0)  # the boot, then its end
        time.sleep(0.05)
    assert emulator.exited[instance_id] == 7
    assert instance_id not in emulator.agents
    log = emulator._state.logs / f"agent-{instance_id}.log"
    assert "no agent here" in log.read_text()  # the console output


def test_a_new_stack_forgets_the_previous_runs_disks_but_keeps_their_logs(
    tmp_path: Path,
) -> None:
    state = StateDir(tmp_path / "dev")
    state.prepare()
    old = state.agent_dir("i-0123456789abcdef0")
    (old / "root/var/log").mkdir(parents=True)
    (old / "root/var/log/corral-agent.log").write_text("registered\n")
    (old / "notice").write_text("10\n")

    assert forget_previous_machines(state) == ["i-0123456789abcdef0"]
    assert not old.exists()
    assert (state.logs / "i-0123456789abcdef0/corral-agent.log").read_text() == "registered\n"
