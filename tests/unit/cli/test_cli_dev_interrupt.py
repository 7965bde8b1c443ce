"""``corral dev interrupt`` takes either id ``corral agent list`` shows: the record id
(``inst-...``, looked up through the stack's API) or the EC2 id (``i-...``). Against a moto
server and a stand-in for the stack's API, both on loopback, with the stack's state files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.local.http_shim import HttpShim
from corral.local.state import StateDir

TOKEN = "dev-token"


@dataclass
class Stack:
    state: StateDir
    ec2: Any
    instance_id: str
    api_calls: list[dict[str, Any]]
    api_url: str
    on_demand_id: str


def _instances(cloud_id: str, on_demand_id: str) -> list[dict[str, Any]]:
    return [
        {"id": "inst-0001", "cloud_id": cloud_id, "state": "BUSY", "pool": "default"},
        {"id": "inst-0002", "cloud_id": None, "state": "REQUESTED", "pool": "default"},
        {"id": "inst-0003", "cloud_id": on_demand_id, "state": "BUSY", "pool": "default"},
    ]


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Stack]:
    import boto3
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer

    from corral.local.moto_server import aws_env, reset

    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    aws = f"http://{host}:{port}"
    env = aws_env(aws)
    for key in ("AWS_ENDPOINT_URL", "CORRAL_ENDPOINT", "CORRAL_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    ec2 = boto3.client(
        "ec2",
        endpoint_url=aws,
        region_name=env["AWS_DEFAULT_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    # As the stack's pools launch them: spot through RunInstances' market options.
    launched = ec2.run_instances(
        ImageId="ami-12345678",
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        InstanceMarketOptions={"MarketType": "spot"},
    )
    instance_id = launched["Instances"][0]["InstanceId"]
    on_demand = ec2.run_instances(
        ImageId="ami-12345678", InstanceType="g5.xlarge", MinCount=1, MaxCount=1
    )
    on_demand_id = on_demand["Instances"][0]["InstanceId"]
    calls: list[dict[str, Any]] = []

    def api(event: dict[str, Any]) -> dict[str, Any]:
        calls.append(event)
        if event["headers"].get("authorization") != f"Bearer {TOKEN}":
            return {"statusCode": 401, "body": json.dumps({"message": "Unauthorized"})}
        if event["rawPath"] != "/agents":
            return {"statusCode": 404, "body": json.dumps({"message": "Not found"})}
        body = {"instances": _instances(instance_id, on_demand_id)}
        return {
            "statusCode": 200,
            "headers": {"content-type": "application/json"},
            "body": json.dumps(body),
        }

    shim = HttpShim(api)
    shim.start()
    state = StateDir(tmp_path / "dev")
    state.prepare()
    state.write(state.pid_file, f"{os.getpid()}\n")  # "the stack": alive as long as the test
    state.write(state.aws_endpoint_file, aws)
    state.write(state.endpoint_file, shim.url)
    state.write(state.token_file, TOKEN)
    monkeypatch.setenv("CORRAL_DEV_DIR", str(state.root))
    # The command points boto3 at the stack's moto for the rest of the process.
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws)
    try:
        yield Stack(state, ec2, instance_id, calls, shim.url, on_demand_id)
    finally:
        shim.stop()
        reset(aws)
        moto.stop()


def interrupt(*args: str) -> Any:
    return CliRunner().invoke(app, ["dev", "interrupt", *args, "--notice", "30"])


def test_a_record_id_is_resolved_to_its_ec2_instance(stack: Stack) -> None:
    result = interrupt("inst-0001")
    assert result.exit_code == 0, result.output
    assert stack.instance_id in result.output and "inst-0001" in result.output
    assert stack.instance_id in stack.state.read_faults()["terminate_at"]
    assert stack.state.notice_file(stack.instance_id).exists()
    assert [c["rawPath"] for c in stack.api_calls] == ["/agents"]
    assert stack.api_calls[0]["queryStringParameters"] == {"all": "true"}


def test_an_ec2_id_is_used_as_is(stack: Stack) -> None:
    result = interrupt(stack.instance_id)
    assert result.exit_code == 0, result.output
    assert stack.instance_id in stack.state.read_faults()["terminate_at"]
    assert stack.api_calls == []  # no lookup needed


@pytest.mark.parametrize(
    ("ident", "says"),
    [
        ("inst-nope", "no instance record inst-nope"),
        ("inst-0002", "inst-0002 has no EC2 instance yet (REQUESTED)"),
        ("i-0000000000000dead", "no EC2 instance i-0000000000000dead in the local stack"),
        ("vol-1234", "INSTANCE_ID must be a record id (inst-...) or an EC2 id (i-...)"),
    ],
)
def test_unknown_ids_are_one_line_without_the_aws_error(
    stack: Stack, ident: str, says: str
) -> None:
    result = interrupt(ident)
    out = result.output.strip()
    assert result.exit_code != 0 and out.startswith(f"error: {says}"), out
    assert "\n" not in out and "An error occurred" not in out, out
    assert stack.state.read_faults().get("terminate_at") in (None, {})


def test_an_instance_that_is_not_running(stack: Stack) -> None:
    stack.ec2.terminate_instances(InstanceIds=[stack.instance_id])
    result = interrupt("inst-0001")
    out = result.output.strip()
    assert result.exit_code != 0 and "is not running" in out and "\n" not in out, out


@pytest.mark.parametrize("endpoint", ["foo", "http://", "http://[::1"])
def test_a_bad_endpoint_is_one_line(stack: Stack, endpoint: str) -> None:
    result = interrupt("inst-0001", "--endpoint", endpoint)
    out = result.output.strip()
    assert result.exit_code != 0 and out.startswith("error: bad endpoint"), out
    assert "\n" not in out and "internal" not in out


def test_an_explicit_endpoint_is_used_for_the_lookup(stack: Stack) -> None:
    result = interrupt("inst-0001", "--endpoint", stack.api_url)
    assert result.exit_code == 0, result.output
    assert len(stack.api_calls) == 1


def test_an_on_demand_instance_is_refused(stack: Stack) -> None:
    # EC2 never interrupts on-demand capacity: a notice to one tests what cannot happen.
    for ident, shown in (
        ("inst-0003", f"inst-0003 ({stack.on_demand_id})"),
        (stack.on_demand_id, stack.on_demand_id),
    ):
        result = interrupt(ident)
        out = result.output.strip()
        assert (result.exit_code, out) == (
            2,
            f"error: {shown} is on-demand: only spot instances get interruption notices",
        )
    assert not stack.state.read_faults().get("terminate_at")
    assert not stack.state.notice_file(stack.on_demand_id).exists()


def test_a_rebalance_recommendation_reaches_the_metadata_and_terminates_nothing(
    stack: Stack,
) -> None:
    result = CliRunner().invoke(app, ["dev", "rebalance", "inst-0001"])
    assert result.exit_code == 0, result.output
    assert f"rebalance recommendation sent to inst-0001 ({stack.instance_id})" in result.output
    assert stack.state.rebalance_file(stack.instance_id).exists()  # what the IMDS serves
    assert not stack.state.read_faults().get("terminate_at")
    assert not stack.state.notice_file(stack.instance_id).exists()

    refused = CliRunner().invoke(app, ["dev", "rebalance", stack.on_demand_id])
    assert refused.exit_code != 0
    assert "only spot instances get rebalance recommendations" in refused.output
    assert not stack.state.rebalance_file(stack.on_demand_id).exists()
