"""Hostile and careless input, by hand: bodies too large or too deep, bytes that are not text,
a grid of 100,000 trials, and shell metacharacters and unicode in every string that reaches
stored data, an agent's start command or an instance's startup script.

Every refusal names the limit or the field, and leaves the tables and queues as they were
(``snapshot``). Strings are stored and handed to the agent exactly as sent; the bootstrap
script carries them without letting any of them run.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from corral.api.http_events import MAX_BODY_BYTES, MAX_JSON_DEPTH, http_event
from corral.bootstrap.render import BootstrapSettings, UnsafeValue, launch_script, render_bootstrap
from corral.domain.config.hyperparameters import MAX_GRID_TRIALS
from corral.domain.errors import LaunchError
from tests.bootstrap_runner import run_bootstrap
from tests.services.harness import Cluster

from .conftest import ApiClient, snapshot
from .events import agent_arn, user_arn

# What a shell, YAML, JSON or a terminal might treat specially, and text beyond ASCII.
HOSTILE = [
    "$(touch {canary})",
    "`touch {canary}`",
    "'; touch {canary}; echo '",
    '"; touch {canary}; echo "',
    "a\ntouch {canary}\n#",
    "${{IFS}}touch${{IFS}}{canary}",
    "x && touch {canary} || touch {canary} | tee {canary} > {canary} < /dev/null &",
    "@@POOL@@ @@STARTUP_SCRIPT@@ CORRAL_STARTUP_EOF_0 CORRAL_CONFIG_EOF_0 EOF",
    "\\'\\\"\\\\ %s %n {{}} \t\r\v\f",
    "Grüße 日本語 🚀 \u202eevil\u202c \u200b \ufeff é",
]


def _hostile(canary: Path) -> list[str]:
    return [h.format(canary=canary) for h in HOSTILE]


def _refused_unchanged(api: ApiClient, cluster: Cluster, status: int, **call: Any) -> Any:
    before = snapshot(cluster)
    reply = api.call("POST", "/experiments", **call)
    assert reply.status == status, reply.text
    assert snapshot(cluster) == before
    assert "Traceback" not in reply.text
    return reply.json


# ---- sizes and shapes ------------------------------------------------------------------------
def test_an_oversized_body_is_refused_before_parsing(api: ApiClient, cluster: Cluster) -> None:
    # Not even JSON: had it been parsed, the answer would be 400 "not valid JSON".
    body = "{" + "x" * MAX_BODY_BYTES
    error = _refused_unchanged(api, cluster, 413, raw_body=body)
    assert f"{MAX_BODY_BYTES:,} bytes" in error["message"]


def test_the_size_counts_bytes_not_characters(api: ApiClient, cluster: Cluster) -> None:
    # 4-byte characters: under the limit in characters, over it in UTF-8.
    text = json.dumps(
        {"config": {"description": "🚀" * (MAX_BODY_BYTES // 4 + 1)}}, ensure_ascii=False
    )
    assert len(text) < MAX_BODY_BYTES < len(text.encode())
    _refused_unchanged(api, cluster, 413, raw_body=text)


def test_a_body_just_under_the_limit_is_parsed(api: ApiClient, cluster: Cluster) -> None:
    # Parsed, then refused by the config's own limits (a config must fit a store item).
    padding = MAX_BODY_BYTES - 200
    reply = api.post("/experiments", {"config": {"entrypoint": "x", "description": "d" * padding}})
    assert reply.status == 422, reply.text[:300]
    assert {e["field"] for e in reply.json["errors"]} == {"", "description"}


@pytest.mark.parametrize(
    "body",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"config": ' + '{"a": ' * 5_000 + "1" + "}" * 5_000 + "}",
        '{"config": {"entrypoint": "x", "hyperparameters": {"h": '
        + "[" * (MAX_JSON_DEPTH + 1)
        + "]" * (MAX_JSON_DEPTH + 1)
        + "}}}",
    ],
    ids=["arrays", "objects", "just-over"],
)
def test_deep_nesting_is_refused_with_the_limit(
    api: ApiClient, cluster: Cluster, body: str
) -> None:
    error = _refused_unchanged(api, cluster, 400, raw_body=body)
    assert f"limit of {MAX_JSON_DEPTH} levels" in error["message"]


def test_brackets_inside_strings_do_not_count_as_nesting(api: ApiClient) -> None:
    text = '[{"\\"]}' * 200
    reply = api.post("/experiments", {"config": {"entrypoint": "x", "description": text}})
    assert reply.status == 201, reply.text


def test_deep_yaml_text_is_refused_naming_the_limit(api: ApiClient, cluster: Cluster) -> None:
    yaml_text = "entrypoint: x\nhyperparameters:\n  h: " + "[" * 5_000 + "]" * 5_000 + "\n"
    error = _refused_unchanged(api, cluster, 422, body={"config": yaml_text})
    (problem,) = error["errors"]
    assert problem["field"] == "" and "nested more than 64 levels" in problem["reason"]


def test_bytes_that_are_not_utf8_are_a_400(cluster: Cluster, api: ApiClient) -> None:
    # As the local server and the GCP function hand them over: declared JSON, not text.
    event = http_event(
        "POST", "/experiments", [("content-type", "application/json")], b"\xff\xfe{", "1.2.3.4"
    )
    assert event["isBase64Encoded"] is True
    event["requestContext"]["authorizer"] = {"iam": {"userArn": user_arn()}}
    before = snapshot(cluster)
    reply = api.resolver.resolve(event, None)
    assert reply["statusCode"] == 400, reply
    assert "UTF-8" in json.loads(reply["body"])["message"]
    assert snapshot(cluster) == before


def _body_routes(api: ApiClient) -> list[tuple[str, str]]:
    doc = api.get("/openapi.json").json
    return [
        (method.upper(), path)
        for path, operations in doc["paths"].items()
        for method, operation in operations.items()
        if "requestBody" in operation
    ]


@pytest.mark.parametrize("content_type", ["text/plain", "application/yaml", "image/png"])
def test_a_body_that_is_not_json_is_a_415_naming_the_content_type(
    api: ApiClient, cluster: Cluster, content_type: str
) -> None:
    body = json.dumps({"config": {"entrypoint": "echo hi"}})
    error = _refused_unchanged(
        api, cluster, 415, raw_body=body, headers={"content-type": content_type}
    )
    assert content_type in error["message"]
    assert "application/json" in error["message"]


def test_every_route_with_a_body_refuses_deep_json_unparsed(
    api: ApiClient, cluster: Cluster
) -> None:
    # The guard is the resolver's own JSON decoder (``json_body_deserializer=``), so it holds
    # for every route that reads a body, the agents' too, before the caller is even checked.
    routes = _body_routes(api)
    assert ("POST", "/agents/{agent_id}/heartbeat") in routes and len(routes) >= 6
    deep = '{"a": ' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1)
    before = snapshot(cluster)
    for method, path in routes:
        concrete = path.replace("{", "").replace("}", "")  # any id: the body is read first
        for caller in (user_arn(), agent_arn("i-0123456789abcdef0")):
            reply = api.call(method, concrete, caller=caller, raw_body=deep)
            assert reply.status == 400, (path, reply.text)
            assert f"limit of {MAX_JSON_DEPTH} levels" in reply.json["message"], path
    assert snapshot(cluster) == before


# ---- searches too large ------------------------------------------------------------------------
def test_a_grid_of_100000_trials_is_refused_naming_the_limit(
    api: ApiClient, cluster: Cluster
) -> None:
    config = {
        "entrypoint": "python train.py",
        "searcher": {"name": "grid"},
        "hyperparameters": {
            "lr": {"type": "double", "minval": 0.0001, "maxval": 0.1, "count": 100},
            "batch": {"type": "int", "minval": 1, "maxval": 1000, "count": 1000},
        },
    }
    error = _refused_unchanged(api, cluster, 422, body={"config": config})
    (problem,) = error["errors"]
    assert problem["field"] == "searcher"
    assert "100,000 trials" in problem["reason"] and f"{MAX_GRID_TRIALS:,}" in problem["reason"]


# ---- numbers a trial could not receive, names and bytes a process cannot start with --------
def test_a_log_range_past_the_largest_float_is_a_422_not_a_500(
    api: ApiClient, cluster: Cluster
) -> None:
    log = {"type": "log", "base": 10, "minval": 0, "maxval": 2000, "count": 3}
    for searcher in ("single", "grid", "random"):
        config = {
            "entrypoint": ["python", "t.py"],
            "hyperparameters": {"a": log},
            "searcher": {"name": searcher, "max_trials": 2},
        }
        error = _refused_unchanged(api, cluster, 422, body={"config": config})
        assert error["errors"] == [
            {
                "field": "hyperparameters.a.maxval",
                "reason": "10**2000 is out of range (a float holds up to about 1.8e308)",
            }
        ]


def test_nan_and_infinity_in_a_json_body_are_refused_naming_the_field(
    api: ApiClient, cluster: Cluster
) -> None:
    # Python's JSON parser reads these non-standard tokens; they must not become null.
    raw = (
        '{"config": {"entrypoint": "x", "hyperparameters": {'
        '"a": {"type": "double", "minval": 0, "maxval": Infinity},'
        '"b": {"type": "const", "val": NaN}, "c": [1, -Infinity]}}}'
    )
    error = _refused_unchanged(api, cluster, 422, raw_body=raw)
    assert [(e["field"], e["reason"]) for e in error["errors"]] == [
        ("hyperparameters.a.maxval", "must be a finite number"),
        ("hyperparameters.b.val", "must be a finite number"),
        ("hyperparameters.c[1]", "must be a finite number"),
    ]


def test_environment_variables_a_trial_cannot_start_with_are_refused(
    api: ApiClient, cluster: Cluster
) -> None:
    variables = {"": "a", "A=B": "c", "X Y": "d", "B": None, "C": [1], "Z": "a\0b"}
    config = {"entrypoint": "x", "environment": {"environment_variables": variables}}
    error = _refused_unchanged(api, cluster, 422, body={"config": config})
    fields = [e["field"] for e in error["errors"]]
    assert fields == ["environment.environment_variables"] * 3 + [
        "environment.environment_variables.B",
        "environment.environment_variables.C",
        "environment.environment_variables.Z",
    ]


def test_a_nul_in_a_command_line_is_a_422_naming_the_argument(
    api: ApiClient, cluster: Cluster
) -> None:
    before = snapshot(cluster)
    reply = api.post("/commands", {"config": {}, "argv": ["echo", "a\0b"]})
    assert reply.status == 422, reply.text
    assert reply.json["errors"] == [
        {"field": "argv[1]", "reason": "must not contain a NUL character"}
    ]
    assert snapshot(cluster) == before


def test_unknown_and_wrongly_typed_fields_are_refused_unchanged(
    api: ApiClient, cluster: Cluster
) -> None:
    error = _refused_unchanged(
        api, cluster, 422, body={"config": {"entrypoint": 5, "resources": {"slots_per_trial": -1}}}
    )
    fields = {e["field"] for e in error["errors"]}
    assert {"entrypoint", "resources.slots_per_trial"} <= fields


# ---- strings: stored, handed over and scripted literally ---------------------------------
def test_hostile_strings_are_stored_and_assigned_literally(
    api: ApiClient, cluster: Cluster, tmp_path: Path
) -> None:
    values = _hostile(tmp_path / "canary")
    # A description is prose: tab and newline are its only control characters, so the
    # vertical tab and form feed stay out of it (test_text_rules.py).
    prose = "\n".join(v for v in values if "\v" not in v)
    config = {
        "name": values[0],
        "description": prose,
        "entrypoint": ["python", "train.py", *values],  # a list: exec'd as is, no shell
        "environment": {"environment_variables": {f"V{i}": v for i, v in enumerate(values)}},
        "hyperparameters": {f"h{i}": v for i, v in enumerate(values)},
    }
    created = api.post("/experiments", {"config": config})
    assert created.status == 201, created.text
    shown = api.get(f"/experiments/{created.json['id']}").json
    assert shown["name"] == values[0]
    assert shown["config"]["description"] == prose
    assert shown["config"]["entrypoint"] == ["python", "train.py", *values]

    # The agent receives exactly what was sent: arguments, environment, hyperparameters.
    cluster.pump()
    cluster.clock.advance(60)
    (cloud_id,) = cluster.running_cloud_ids()
    agent_id = api.register(cloud_id).json["agent_id"]
    cluster.pump()  # the registration woke the scheduler: the trial is assigned
    beat = api.post(f"/agents/{agent_id}/heartbeat", {}, caller=agent_arn(cloud_id))
    (start,) = beat.json["start"]
    assert start["entrypoint"] == ["python", "train.py", *values]
    assert start["environment"] | {f"V{i}": v for i, v in enumerate(values)} == start["environment"]
    assert start["hyperparameters"] == {f"h{i}": v for i, v in enumerate(values)}
    assert not (tmp_path / "canary").exists()


@pytest.mark.parametrize("index", range(len(HOSTILE)))
def test_the_bootstrap_carries_hostile_values_literally(tmp_path: Path, index: int) -> None:
    canary = tmp_path / "canary"
    value = _hostile(canary)[index]
    # The startup script is the pool owner's code and runs: the value follows its exit.
    startup = f"echo startup-ran\nexit 0\n{value}\n"
    settings = BootstrapSettings(
        api_url=f"https://api.example.com/{value}",
        auth="aws",
        pool=value,  # the config refuses such names; the renderer must not rely on it
        record_id=value,
        startup_script=startup,
        container_startup_script=value,
        agent_wheel_url=f"https://cp.example.com/{value}",
        http_proxy=value,
        cloudwatch_log_group=value,
        agent_settings={"extra": value},
    )
    script = render_bootstrap(settings, max_bytes=1_000_000)
    syntax = subprocess.run(
        ["bash", "-n"], input=script, capture_output=True, text=True, check=False
    )
    assert syntax.returncode == 0, syntax.stderr

    done = run_bootstrap(script, tmp_path)
    assert done.returncode == 0, done.stderr
    stdout = done.stdout.decode()
    assert "startup-ran" in stdout
    assert not canary.exists(), "a value ran as a command"
    etc = tmp_path / "etc" / "corral"
    assert (etc / "startup_script.sh").read_bytes().decode() == startup
    config = json.loads((etc / "agent.yaml").read_text())
    assert config["pool"] == config["record_id"] == config["container_startup_script"] == value
    assert config["api_url"] == f"https://api.example.com/{value}"
    assert config["http_proxy"] == config["cloudwatch_log_group"] == config["extra"] == value
    assert f"corral[agent] @ https://cp.example.com/{value}" in stdout


def test_a_newline_in_the_pool_name_stays_in_the_comment(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    script = render_bootstrap(
        BootstrapSettings(api_url="https://a", auth="aws", pool=f"gpu\ntouch {canary}\n#")
    )
    assert run_bootstrap(script, tmp_path).returncode == 0
    assert not canary.exists()


def test_a_nul_character_is_refused_as_a_launch_error() -> None:
    settings = BootstrapSettings(
        api_url="https://a", auth="aws", pool="gpu", startup_script="a\x00b"
    )
    with pytest.raises(UnsafeValue):
        render_bootstrap(settings)
    with pytest.raises(LaunchError) as refused:
        launch_script(lambda: settings, 16_384, "UserDataTooLarge")
    assert refused.value.code == "UnsafeValue"
