"""The trimmed AWS service models: what is shipped, what the clients load, and how they are
made. That every call the adapters make is in them is checked where the calls are recorded
(tests/infra/test_ec2_grants.py for EC2) and by the functional and contract suites, whose
clients are made over these models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.aws import clients
from corral.adapters.aws.service_models import MODELS_DIR, OPERATIONS, trim, write_models


def _shipped() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(MODELS_DIR.glob("*/*/service-2.json")):
        found[path.parts[-3]] = json.loads(path.read_text())
    return found


def _references(shape: dict[str, Any]) -> list[str]:
    refs = [shape[k]["shape"] for k in ("member", "key", "value") if k in shape]
    return refs + [ref["shape"] for ref in shape.get("members", {}).values()]


def test_one_model_per_service_each_with_exactly_its_operations() -> None:
    shipped = _shipped()

    assert sorted(shipped) == sorted(OPERATIONS)
    for service, model in shipped.items():
        assert sorted(model["operations"]) == sorted(OPERATIONS[service]), service


def test_every_shape_the_operations_reach_is_there_and_no_other() -> None:
    for service, model in _shipped().items():
        shapes = model["shapes"]
        for shape in shapes.values():
            assert set(_references(shape)) <= set(shapes), service
        # Trimming a trimmed model changes nothing: nothing unreachable was kept.
        assert trim(model, OPERATIONS[service]) == model, service


def test_trim_keeps_what_an_operation_reaches_through_lists_maps_and_errors() -> None:
    model = {
        "metadata": {"protocol": "json"},
        "documentation": "a service",
        "operations": {
            "Get": {
                "name": "Get",
                "input": {"shape": "In"},
                "errors": [{"shape": "Nope"}],
                "documentation": "gets",
            },
            "Other": {"name": "Other", "input": {"shape": "Unused"}},
        },
        "shapes": {
            "In": {
                "type": "structure",
                "members": {"Keys": {"shape": "KeyList", "documentation": "the keys"}},
            },
            "KeyList": {"type": "list", "member": {"shape": "Tags"}},
            "Tags": {"type": "map", "key": {"shape": "S"}, "value": {"shape": "N"}},
            "S": {"type": "string"},
            "N": {"type": "integer", "documentation": "a number"},
            "Nope": {"type": "structure", "members": {}, "exception": True},
            "Unused": {"type": "string"},
        },
    }

    trimmed = trim(model, ["Get"])

    assert list(trimmed["operations"]) == ["Get"]
    assert sorted(trimmed["shapes"]) == ["In", "KeyList", "N", "Nope", "S", "Tags"]
    assert "documentation" not in json.dumps(trimmed)
    assert trimmed["metadata"] == {"protocol": "json"}


def test_clients_load_the_trimmed_models_and_botocore_for_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_DATA_PATH", raising=False)
    clients.reset()

    for service, operations in OPERATIONS.items():
        model = clients.client(service).meta.service_model
        assert sorted(model.operation_names) == sorted(operations), service
    # DynamoDB and SQS are not trimmed: their full models come from botocore.
    assert "ReceiveMessage" in clients.client("sqs").meta.service_model.operation_names
    assert "DeleteTable" in clients.client("dynamodb").meta.service_model.operation_names
    # What a trimmed client leaves out, it does not have.
    assert not hasattr(clients.client("ec2"), "describe_volumes")


def test_a_data_path_of_the_environment_is_searched_after_the_trimmed_models(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from botocore.loaders import Loader

    sqs = Loader().load_service_model("sqs", "service-2")
    version = Loader().determine_latest_version("sqs", "service-2")
    (tmp_path / "sqs" / version).mkdir(parents=True)
    (tmp_path / "sqs" / version / "service-2.json").write_text(
        json.dumps(trim(sqs, ["SendMessageBatch"]))
    )
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    clients.reset()

    assert clients.client("sqs").meta.service_model.operation_names == ["SendMessageBatch"]
    assert len(clients.client("ec2").meta.service_model.operation_names) == len(OPERATIONS["ec2"])


def test_the_generator_writes_the_shipped_files_from_botocore(tmp_path: Path) -> None:
    written = write_models(tmp_path)

    assert sorted(p.relative_to(tmp_path) for p in written) == sorted(
        p.relative_to(MODELS_DIR) for p in MODELS_DIR.glob("*/*/service-2.json")
    )
    for path in written:
        service = path.parts[-3]
        regenerated = json.loads(path.read_text())
        assert sorted(regenerated["operations"]) == sorted(OPERATIONS[service])
        assert regenerated["metadata"]["protocol"] == _shipped()[service]["metadata"]["protocol"]
