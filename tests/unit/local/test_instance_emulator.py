"""The local stack's instance emulator against moto in-process: a stopped instance's agent
dies with it, and a start boots a fresh agent after the boot delay (the warm pool).

The agent itself is replaced by a ``sleep`` (the emulator's process handling is what is
under test, not the agent); ``tick(now=...)`` drives time, so nothing sleeps.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.local.instance_emulator import EmulatorSettings, InstanceEmulator
from corral.local.state import StateDir
from tests.moto_env import REGION, use_moto_env

OWNERSHIP = ("managed-by", "corral-dev")
BOOT_DELAY_S = 5.0


@pytest.fixture
def emulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    """(an EC2 client on moto, an emulator watching it) with a sleep for each agent."""
    boto3 = pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    use_moto_env(monkeypatch)
    real_popen = subprocess.Popen

    def sleeper(args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        if "agent_runtime.main" in args:  # the emulator booting an agent
            args = ["sleep", "600"]
        return real_popen(args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", sleeper)
    state = StateDir(tmp_path / "dev")
    state.prepare()
    settings = EmulatorSettings(
        api_url="http://127.0.0.1:9",
        agent_secret=b"secret",
        ownership=(OWNERSHIP,),
        boot_delay_s=BOOT_DELAY_S,
    )
    with moto.mock_aws():
        session = boto3.Session(region_name=REGION)
        emulator = InstanceEmulator(state, session, settings, threading.Event())
        try:
            yield session.client("ec2"), emulator
        finally:
            emulator.stop_all(grace_s=0.0)


def run_instance(ec2: Any) -> str:
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
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return str(reply["Instances"][0]["InstanceId"])


def booted(emulator: InstanceEmulator, instance_id: str, now: float) -> subprocess.Popen[bytes]:
    """Tick through a boot starting at ``now``: no agent before the delay, one after it."""
    emulator.tick(now=now)
    assert instance_id not in emulator.agents
    emulator.tick(now=now + BOOT_DELAY_S)
    return emulator.agents[instance_id].proc


def test_a_stopped_instance_loses_its_agent_and_a_start_boots_a_fresh_one(
    emulated: tuple[Any, Any],
) -> None:
    ec2, emulator = emulated
    instance_id = run_instance(ec2)
    first = booted(emulator, instance_id, now=0.0)

    ec2.stop_instances(InstanceIds=[instance_id])
    emulator.tick(now=10.0)
    assert instance_id not in emulator.agents
    assert first.poll() is not None  # killed, as a powered-off machine's processes are

    ec2.start_instances(InstanceIds=[instance_id])
    second = booted(emulator, instance_id, now=20.0)  # the boot delay again, not at once
    assert second.pid != first.pid and second.poll() is None


def test_an_agent_that_quit_boots_again_after_a_stop_and_start(
    emulated: tuple[Any, Any],
) -> None:
    ec2, emulator = emulated
    instance_id = run_instance(ec2)
    first = booted(emulator, instance_id, now=0.0)
    first.kill()
    first.wait()
    emulator.tick(now=6.0)
    assert instance_id in emulator.exited
    emulator.tick(now=60.0)
    assert instance_id not in emulator.agents  # quit on its own: not restarted (as systemd)

    ec2.stop_instances(InstanceIds=[instance_id])
    emulator.tick(now=70.0)
    ec2.start_instances(InstanceIds=[instance_id])
    again = booted(emulator, instance_id, now=80.0)  # a reboot starts the service again
    assert again.poll() is None
