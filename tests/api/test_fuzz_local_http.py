"""The API fuzzed through the real path: the local stack's HTTP server (waitress, over a
socket) in front of the template's ``api`` function, its real handler, on DynamoDB in a moto
server (``local_api.py``: what ``make run`` serves, without pollers and instances).

``test_fuzz_openapi.py`` fuzzes the resolver in process over the in-memory adapters, with
every conformance check; this one sends what schemathesis generates over HTTP to the stack's
code path end to end (HTTP parsing, the event conversion, the Lambda handler, boto3, moto's
DynamoDB) and checks one thing, that nothing answers a 5xx (``not_a_server_error``):

- every operation of ``/openapi.json``, valid requests and, where a request can break the
  schema (a body or a query parameter), invalid ones;
- stateful sequences along the links between operations (schemathesis infers them from the
  document: ``POST /experiments`` -> ``GET /experiments/{experiment_id}``, its kill, trials and
  metrics, ``GET /pools`` -> reset-breaker, ...);
- explicit requests that once answered 500 (below), so they stay covered.

Bounded for ``make test`` (about a minute on 2 cores): ``CORRAL_HTTP_FUZZ_EXAMPLES`` examples
per operation and mode (8), ``CORRAL_HTTP_FUZZ_STATEFUL`` scenarios (15); derandomized unless
``CORRAL_FUZZ_SEED`` is set. A failure names the request (with a curl line) and the response.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("CORRAL_HTTP_FUZZ_EXAMPLES", "12"))
SCENARIOS = int(os.environ.get("CORRAL_HTTP_FUZZ_STATEFUL", "20"))
STEPS = 8  # requests per scenario at most (Hypothesis's default, 50, takes minutes here)
SEED = os.environ.get("CORRAL_FUZZ_SEED")
READY_TIMEOUT_S = 60.0
EXAMPLE_EXPERIMENT = (ROOT / "examples" / "experiment.yaml").read_text()


@dataclass
class LocalApi:
    url: str
    token: str
    log: Path
    requests: int = 0
    answers: dict[str, list[int]] = field(default_factory=dict)  # statuses per operation
    server_errors: list[str] = field(default_factory=list)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture(scope="module")
def local_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalApi]:
    state = tmp_path_factory.mktemp("fuzz-stack") / "dev"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "functions"), str(ROOT)])}
    errors = state.parent / "stderr.log"
    with errors.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.api.local_api", str(state), "examples/cluster.yaml"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_S)
        line = proc.stdout.readline() if ready else b""
        assert line, f"the local API did not start: {errors.read_text()[-2000:]}"
        served = json.loads(line)
        yield LocalApi(served["url"], served["token"], state / "logs" / "functions.log")
    finally:
        proc.stdin.close()  # the server's signal to stop (moto too)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def schema(local_api: LocalApi) -> Any:
    return schemathesis.openapi.from_url(f"{local_api.url}/openapi.json")


def _settings(max_examples: int, steps: int = 50) -> settings:
    return settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=SEED is None,
        suppress_health_check=list(HealthCheck),
    )


def _negatable(operation: Any) -> bool:
    raw = operation.definition.raw
    return "requestBody" in raw or any(p.get("in") == "query" for p in raw.get("parameters", []))


def _check(local_api: LocalApi, case: Any, response: Any) -> None:
    """No 5xx."""
    local_api.requests += 1
    local_api.answers.setdefault(case.operation.label, []).append(response.status_code)
    if response.status_code < 500:
        return
    case.validate_response(response, checks=[not_a_server_error], headers=local_api.headers)


def _fuzz(local_api: LocalApi, operation: Any, mode: GenerationMode) -> None:
    @_settings(EXAMPLES)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        case = data.draw(operation.as_strategy(generation_mode=mode))
        _check(local_api, case, case.call(headers=local_api.headers, timeout=30))

    if SEED is not None:
        run = seed(int(SEED))(run)
    run()


def test_every_operation_answers_without_a_5xx(local_api: LocalApi, schema: Any) -> None:
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15, "the document lost operations: the fuzz would skip them"
    cases = [(op, GenerationMode.POSITIVE) for op in operations] + [
        (op, GenerationMode.NEGATIVE) for op in operations if _negatable(op)
    ]
    started = time.monotonic()
    failures: list[str] = []
    for operation, mode in cases:
        try:
            _fuzz(local_api, operation, mode)
        except Exception as failure:  # every operation runs; all failures are listed
            failures.append(f"{operation.label} ({mode.value}): {failure}")
    took = time.monotonic() - started
    print(
        f"\nlocal HTTP fuzz: {len(operations)} operations, {len(cases)} runs, "
        f"{local_api.requests} requests in {took:.1f} s; {len(failures)} failing"
    )
    assert not failures, "\n\n".join(failures)


def test_stateful_sequences_answer_without_a_5xx(local_api: LocalApi, schema: Any) -> None:
    machine = schema.as_state_machine()
    # The links the scenarios follow: without them this test would only repeat the one above.
    names = " ".join(name for name in dir(machine) if not name.startswith("_"))
    assert "POST_experiments___201" in names and "POST_experiments_experiment_id_kill" in names

    class Scenario(machine):  # type: ignore[misc, valid-type]
        def before_call(self, case: Any) -> None:
            # A generated config is almost never a valid experiment (the body is fuzzed in
            # the test above): submit the example one, so there is an experiment to follow.
            if case.operation.label == "POST /experiments":
                case.body = {"config": EXAMPLE_EXPERIMENT}

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": local_api.headers, "timeout": 30}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            _check(local_api, case, response)

    before, started = local_api.requests, time.monotonic()
    local_api.answers.clear()
    Scenario.run(settings=_settings(SCENARIOS, steps=STEPS))
    followed = {
        label: sum(200 <= status < 300 for status in local_api.answers.get(label, []))
        for label in ("GET /experiments/{experiment_id}", "POST /experiments/{experiment_id}/kill")
    }
    print(
        f"\nlocal HTTP fuzz, stateful: {SCENARIOS} scenarios, "
        f"{local_api.requests - before} requests in {time.monotonic() - started:.1f} s; "
        f"2xx along links: {followed}"
    )
    # An id from a created experiment, not a generated one (those are 404s).
    assert all(followed.values()), followed


def _experiment(name: str) -> dict[str, Any]:
    config = {
        "name": name,
        "entrypoint": "python train.py",
        "searcher": {"name": "single", "metric": "loss"},
        "resources": {"slots_per_trial": 1},
    }
    return {"config": config}


EXPLICIT = [
    pytest.param("GET", "/agents?pool=", None),
    pytest.param("GET", "/instances?pool=", None),
    pytest.param("GET", "/events?pool=", None),
    pytest.param(
        "POST",
        "/experiments",
        _experiment("\ud800"),
    ),
    pytest.param(
        "POST",
        "/commands",
        {"argv": ["echo", "\ud800"]},
    ),
    pytest.param("POST", "/experiments", _experiment("\x1b[31mred\x1b[0m")),
]


@pytest.mark.parametrize(
    ("method", "target", "body"),
    EXPLICIT,
    ids=[
        "agents-empty-pool",
        "instances-empty-pool",
        "events-empty-pool",
        "experiment-named-lone-surrogate",
        "command-argv-lone-surrogate",
        "experiment-named-escape-sequence",
    ],
)
def test_requests_that_once_answered_500(
    local_api: LocalApi, method: str, target: str, body: Any
) -> None:
    # json.dumps writes a lone surrogate as the escape "\ud800": valid JSON text, which the
    # API decodes to a str no UTF-8 encoder accepts.
    data = json.dumps(body).encode() if body is not None else None
    headers = {**local_api.headers, "Content-Type": "application/json"}
    reply = requests.request(method, local_api.url + target, data=data, headers=headers, timeout=30)
    assert reply.status_code < 500, (
        f"{method} {target} {data!r} -> {reply.status_code} {reply.text}"
    )
    assert reply.headers["content-type"] == "application/json"
    if reply.status_code >= 400:  # refused, saying why
        assert reply.json()["message"].strip(), reply.text
