"""The text rule (``corral.domain.text``) at the API's edge, through the real resolver over a
DynamoDB store (moto): what DynamoDB cannot store or key on (a lone surrogate, an empty key)
was a 500 after the store's retries; what a terminal would obey (ESC, newlines) was stored
as a name and printed raw. Each is now a 422 naming the field, with nothing written."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from corral.adapters.aws import dynamo_schema as schema
from corral.adapters.aws.dynamo_store import DynamoStore
from corral.domain import text
from tests.moto_env import moto_environ
from tests.services.harness import Cluster, make_pool

from .conftest import ApiClient, Reply, snapshot
from .events import http_event, user_arn

moto = pytest.importorskip("moto")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """The API's cluster, its records in DynamoDB (moto) as deployed."""
    import boto3

    with moto_environ(), moto.mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        schema.create_tables(client, "t-")
        cluster = Cluster(make_pool(max_instances=2))
        cluster.store = DynamoStore(client, prefix="t-", sleep=lambda _: None)  # type: ignore[assignment]
        cluster.ctx = dataclasses.replace(cluster.ctx, store=cluster.store)
        yield cluster


def _get(api: ApiClient, path: str, query: dict[str, str]) -> Reply:
    # Built by hand: a lone surrogate cannot be URL-encoded, and API Gateway hands the
    # decoded values over in queryStringParameters.
    event = http_event("GET", path, iam_arn=user_arn())
    event["queryStringParameters"] = query
    event["rawQueryString"] = "&".join(f"{k}=..." for k in query)
    result = api.resolver.resolve(event, None)
    return Reply(int(result["statusCode"]), {}, result.get("body") or "")


def _refused(reply: Reply, field: str) -> str:
    assert reply.status == 422, reply.text
    assert "Traceback" not in reply.text and "internal error" not in reply.text
    (error,) = reply.json["errors"]
    assert error["field"] == field, reply.text
    return str(error["reason"])


# ---- query parameters ------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/agents", "/instances", "/events"])
def test_an_empty_pool_is_a_422_naming_pool(api: ApiClient, path: str) -> None:
    assert _refused(_get(api, path, {"pool": ""}), "pool") == "must not be empty"
    assert _get(api, path, {"pool": "gpu"}).status == 200  # the same lookup, named


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/agents", "pool"),
        ("/instances", "pool"),
        ("/events", "pool"),
        ("/experiments", "owner"),
        ("/experiments/exp-1/metrics", "name"),
    ],
)
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("gp\ud800u", "without lone surrogates (\\ud800 at character 3)"),
        ("gp\x1b[2Ju", "control characters (\\x1b at character 3)"),
        ("gp\x00u", "NUL"),
        ("gp\nu", "control characters (\\n at character 3)"),
        ("\u202egpu", "bidirectional controls (\\u202e at character 1)"),
    ],
    ids=["surrogate", "esc", "nul", "newline", "bidi"],
)
def test_a_query_value_that_is_not_one_line_of_text_is_a_422(
    api: ApiClient, path: str, name: str, value: str, reason: str
) -> None:
    assert reason in _refused(_get(api, path, {name: value}), name)


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/events", "limit"),
        ("/events", "since"),
        ("/agents", "all"),
        ("/experiments", "mine"),
        ("/experiments", "owner"),
        ("/experiments/exp-1/trials", "offset"),
        ("/trials/t-1/logs", "after_seq"),
        ("/trials/t-1/metrics", "kind"),
        ("/experiments/exp-1/metrics", "name"),
    ],
)
def test_every_empty_query_value_is_a_422_naming_it(api: ApiClient, path: str, name: str) -> None:
    assert _refused(_get(api, path, {name: ""}), name) == "must not be empty"


def test_a_path_id_longer_than_the_bound_is_a_422_naming_it(api: ApiClient) -> None:
    reply = api.get("/experiments/" + "e" * (text.MAX_ID_CHARS + 1))
    assert _refused(reply, "experiment_id") == f"must be at most {text.MAX_ID_CHARS} characters"


# ---- request bodies --------------------------------------------------------------------------
def _post_refused(api: ApiClient, cluster: Cluster, path: str, raw: str, field: str) -> str:
    before = snapshot(cluster)
    reason = _refused(api.call("POST", path, raw_body=raw), field)
    assert snapshot(cluster) == before
    return reason


def _experiment(config: dict[str, Any], **request: Any) -> str:
    return json.dumps({"config": {"entrypoint": "python train.py", **config}, **request})


def test_a_lone_surrogate_in_a_name_is_a_422_and_nothing_is_written(
    api: ApiClient, cluster: Cluster
) -> None:
    raw = _experiment({"name": "exp\ud800"})  # json.dumps writes it as "\ud800"
    reason = _post_refused(api, cluster, "/experiments", raw, "name")
    assert reason == "must be valid Unicode text, without lone surrogates (\\ud800 at character 4)"


def test_a_lone_surrogate_in_a_command_line_is_a_422_and_nothing_is_written(
    api: ApiClient, cluster: Cluster
) -> None:
    raw = json.dumps({"config": {}, "argv": ["echo", "a\ud800"]})
    reason = _post_refused(api, cluster, "/commands", raw, "argv[1]")
    assert "lone surrogates (\\ud800 at character 2)" in reason


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"description": "x\ud800"}, "description"),
        (
            {"hyperparameters": {"lr": {"type": "const", "val": ["\udfff"]}}},
            "hyperparameters.lr.val[0]",
        ),
        (
            {"environment": {"environment_variables": {"A": "\ud800"}}},
            "environment.environment_variables.A",
        ),
        ({"resources": {"resource_pool": "gpu\ud800"}}, "resources.resource_pool"),
    ],
    ids=["description", "constant", "env-value", "pool"],
)
def test_a_lone_surrogate_anywhere_in_a_config_is_a_422_naming_it(
    api: ApiClient, cluster: Cluster, config: dict[str, Any], field: str
) -> None:
    assert "lone surrogates" in _post_refused(
        api, cluster, "/experiments", _experiment(config), field
    )


def test_a_lone_surrogate_in_the_client_token_names_it(api: ApiClient, cluster: Cluster) -> None:
    raw = _experiment({}, client_token="tok\ud800")
    assert "lone surrogates" in _post_refused(api, cluster, "/experiments", raw, "client_token")


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("evil\x1b]0;pwned\x07", "must not contain control characters (\\x1b at character 5)"),
        ("a\x00b", "must not contain a NUL character"),
        ("line one\nline two", "must not contain control characters (\\n at character 9)"),
        ("tab\there", "must not contain control characters (\\t at character 4)"),
        ("\x9b31m", "must not contain control characters (\\x9b at character 1)"),
        ("abc\u202edcba", "must not contain bidirectional controls (\\u202e at character 4)"),
        ("n" * 10_000, "must be at most 256 characters"),
        ("", "must not be empty"),
    ],
    ids=["esc", "nul", "newline", "tab", "c1", "bidi", "10000", "empty"],
)
def test_a_name_that_is_not_one_short_line_is_refused(
    api: ApiClient, cluster: Cluster, name: str, reason: str
) -> None:
    raw = _experiment({"name": name})
    assert _post_refused(api, cluster, "/experiments", raw, "name") == reason


def test_names_inside_a_config_follow_the_same_rule(api: ApiClient, cluster: Cluster) -> None:
    hp = _experiment({"hyperparameters": {"lr\x1b": 0.1}})
    reason = _post_refused(api, cluster, "/experiments", hp, "hyperparameters")
    assert reason == "name 'lr\\x1b' must not contain control characters (\\x1b at character 3)"
    env = _experiment({"environment": {"environment_variables": {"A\x1bB": "1"}}})
    reason = _post_refused(api, cluster, "/experiments", env, "environment.environment_variables")
    assert reason == "name 'A\\x1bB' must not contain control characters (\\x1b at character 2)"


def test_a_description_is_prose_and_a_command_line_is_data(api: ApiClient) -> None:
    # Newlines and tabs are what a description is made of; a command line may carry any
    # text but NUL (a shell script, an escape sequence a program prints).
    created = api.post(
        "/experiments",
        {"config": {"entrypoint": "x", "name": "fine", "description": "one\n\ttwo\r\n"}},
    )
    assert created.status == 201, created.text
    command = api.post("/commands", {"config": {}, "argv": ["printf", "\x1b[1mbold\n"]})
    assert command.status == 201, command.text
    # The command's generated name is one line: the newline and ESC are shown, not kept.
    assert command.json["name"] == "command: printf \\x1b[1mbold\\n"
    assert command.json["config"]["entrypoint"] == ["printf", "\x1b[1mbold\n"]
