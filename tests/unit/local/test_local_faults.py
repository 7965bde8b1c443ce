"""Fault injection: capacity errors through a botocore hook, interruption bookkeeping."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.local import faults
from corral.local.faults import FaultError, OfferingMatch
from corral.local.state import StateDir
from tests.moto_env import use_moto_env
from tests.moto_images import register_image

SPOT = {"InstanceType": "g5.xlarge", "InstanceMarketOptions": {"MarketType": "spot"}}


def test_offering_spellings() -> None:
    assert OfferingMatch.parse("g5.xlarge") == OfferingMatch("g5.xlarge")
    assert OfferingMatch.parse("g5.xlarge:spot") == OfferingMatch("g5.xlarge", None, "spot")
    full = OfferingMatch.parse("g5.xlarge|subnet-1|on-demand")
    assert full == OfferingMatch("g5.xlarge", "subnet-1", "on-demand")
    assert OfferingMatch.parse("g5.xlarge:spot").matches(SPOT, "us-east-1")
    assert not OfferingMatch.parse("g5.xlarge:on-demand").matches(SPOT, "us-east-1")
    assert not full.matches({**SPOT, "SubnetId": "subnet-1"}, "us-east-1")
    for bad in ("", "g5.xlarge:cheap", "a|b|c|d"):
        with pytest.raises(FaultError):
            OfferingMatch.parse(bad)


def test_capacity_hook_refuses_only_the_marked_offering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3
    from botocore.exceptions import ClientError
    from moto import mock_aws

    use_moto_env(monkeypatch)
    state = StateDir(tmp_path)
    assert faults.set_unavailable(state, "g5.xlarge:spot") == "g5.xlarge|*|spot"
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        faults.install_capacity_faults(state, ec2.meta.events)
        args = {
            "ImageId": "ami-12345678",
            "MinCount": 1,
            "MaxCount": 1,
            "InstanceType": "g5.xlarge",
        }
        with pytest.raises(ClientError) as refused:
            ec2.run_instances(**args, InstanceMarketOptions={"MarketType": "spot"})
        assert refused.value.response["Error"]["Code"] == "InsufficientInstanceCapacity"
        assert ec2.run_instances(**args)["Instances"]  # on-demand still launches
        faults.set_unavailable(state, "g5.xlarge:spot", unavailable=False)
        assert ec2.run_instances(**args, InstanceMarketOptions={"MarketType": "spot"})


def test_due_terminations_are_handed_out_once(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    with state.edit_faults() as data:
        data["terminate_at"] = {"i-1": 100.0, "i-2": 300.0}
    assert faults.due_terminations(state, now=200.0) == ["i-1"]
    assert faults.due_terminations(state, now=200.0) == []
    assert faults.due_terminations(state, now=400.0) == ["i-2"]


def test_state_children_and_files(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "dev")
    state.prepare()
    state.add_child(11)
    state.add_child(12)
    state.remove_child(11)
    assert state.children() == [12]
    state.write(state.endpoint_file, "http://x\n")
    assert state.endpoint() == "http://x" and state.running_pid() is None
    state.clear_runtime_files()
    assert state.endpoint() is None and state.children() == []


def test_the_handlers_launches_meet_the_capacity_faults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stack's handlers launch through an EC2 provider made without a client (as
    # composition makes it): its client comes from the adapters' own session.
    import boto3
    from moto import mock_aws

    from corral.adapters.aws.ec2_provider import Ec2Provider
    from corral.domain.config.aws import AwsProvider
    from corral.domain.errors import LaunchError
    from corral.domain.offerings import CapacityType, Offering
    from corral.ports.cloud import LaunchRequest

    use_moto_env(monkeypatch)
    state = StateDir(tmp_path)
    faults.set_unavailable(state, "g5.xlarge:spot")
    with mock_aws():
        faults.install_handler_capacity_faults(state)
        image = register_image(boto3.client("ec2", region_name="us-east-1"), "agent")
        block = AwsProvider.model_validate(
            {"type": "aws", "region": "us-east-1", "image_id": image, "spot": True}
        )
        provider = Ec2Provider({"gpu": block}, api_url="https://a")
        spot = Offering("g5.xlarge", "us-east-1", CapacityType.SPOT, 1, 0.4)
        with pytest.raises(LaunchError, match="InsufficientInstanceCapacity"):
            provider.launch(LaunchRequest("rec-1", "gpu", spot, "rec-1-a0"))
