"""Cold start, honestly: each Lambda handler from a fresh interpreter to its first handled
event, next to a bare boto3 client call measured the same way in the same run.

A cold start pays for imports, composition (the cluster config read from SSM and
validated), the clients, and the first call. So each measurement is a fresh interpreter that
imports the handler and handles one real-shaped event against a moto server on loopback,
with the function's environment as ``infra/template.yaml`` gives it (tables, queues, and the
config in an SSM parameter, as deployed). The baseline is the least any Python Lambda that
talks to AWS pays: ``import boto3``, one client, one call. Ratios, because these machines
are noisy; the median of ``--runs`` fresh interpreters.

Accuracy on a shared, noisy machine: the runs are interleaved (each round runs the baseline
and every function once), so a burst of load from another process lands on all of them
rather than on whichever block of runs happened to be running; and one extra first round is
discarded, because it pays for what no deployed cold start pays: moto creating a service's
backend on its first request (the first ``DescribeInstances`` took 0.35 s, later ones
0.006 s) and the OS page cache reading each library's files from disk.

Run: ``python benchmarks/cold_start.py [--runs N] [--floor] [--against DIR]`` (about a minute).

``--floor`` adds, in the same rounds, what any function of this design pays before doing its
own work, one cost at a time on top of the baseline: the SSM client and read, Powertools'
Logger and Metrics, pydantic and PyYAML, then Corral's config models validating the config
(printed below the handlers; docs/benchmarks.md reads the gap from it).

``--breakdown`` adds, per handler, what its start is made of: the share of each family of
imports (the AWS SDK, Powertools, pydantic, PyYAML, Corral's config models, the rest of
Corral, the standard library) and of the handler's own work, and how many dataclasses the
start defines (``cold_start_breakdown.py``).

``--against DIR`` times each handler a second time in the same rounds from another
checkout's ``functions/`` (``git worktree add /tmp/before main``, then ``--against
/tmp/before/functions``) and prints the median of the paired ratios: how a change moved each
handler, with the load of each round on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "functions"))

from corral.local.moto_server import MotoServer, apply_aws_env, aws_env  # noqa: E402
from corral.local.resources import LocalResources, create_from_template  # noqa: E402
from corral.ports.commands import LaunchInstance, Schedule  # noqa: E402

TEMPLATE = REPO / "infra" / "template.yaml"
CONFIG = REPO / "examples" / "cluster.yaml"
PARAMETER = "/corral/bench/cluster-config"
BUDGET = 1.5  # x the baseline: the bar every handler must meet
AGAINST = "against: "  # probe names of --against

# The child: everything after the interpreter is up is the cold start we measure.
HANDLER_PROBE = """
import json, sys, time
start = time.perf_counter()
import importlib
module, _, attr = sys.argv[1].rpartition(".")
handler = getattr(importlib.import_module(module), attr)
class Context:
    function_name = "bench"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:bench"
    aws_request_id = "00000000-0000-0000-0000-000000000000"
    def get_remaining_time_in_millis(self):
        return 60_000
handler(json.loads(open(sys.argv[2]).read()), Context())
print("CORRAL-BENCH", time.perf_counter() - start, int("boto3" in sys.modules))
"""

BASELINE_PROBE = """
import sys, time
start = time.perf_counter()
import boto3
boto3.client("dynamodb").describe_table(TableName=sys.argv[1])
print("CORRAL-BENCH", time.perf_counter() - start, 1)
"""


# The floor: the baseline plus one irreducible cost per step (see --floor).
_FLOOR_SSM = "boto3.client('ssm').get_parameter(Name=sys.argv[2])"
_FLOOR_CALL = "boto3.client('dynamodb').describe_table(TableName=sys.argv[1])"
_FLOOR_POWERTOOLS = (
    "from aws_lambda_powertools import Logger, Metrics\n"
    "Logger(service='bench'); Metrics(namespace='bench', service='bench')"
)
FLOOR_STEPS = {
    "floor: + SSM client and read": f"import boto3\n{_FLOOR_SSM}\n{_FLOOR_CALL}",
    "floor: + Powertools logger+metrics": (
        f"{_FLOOR_POWERTOOLS}\nimport boto3\n{_FLOOR_SSM}\n{_FLOOR_CALL}"
    ),
    "floor: + pydantic, PyYAML": (
        f"import pydantic, yaml\n{_FLOOR_POWERTOOLS}\nimport boto3\n{_FLOOR_SSM}\n{_FLOOR_CALL}"
    ),
    "floor: + config models, validation": (
        "from corral.handlers.config_source import parse_cluster_config\n"
        f"{_FLOOR_POWERTOOLS}\nimport boto3\n"
        f"parse_cluster_config({_FLOOR_SSM}['Parameter']['Value'], 'SSM', {{}})\n{_FLOOR_CALL}"
    ),
}


def floor_probe(code: str) -> str:
    return f"import sys, time\nstart = time.perf_counter()\n{code}\n" + (
        'print("CORRAL-BENCH", time.perf_counter() - start, 1)\n'
    )


def sqs_event(queue_arn: str, body: str) -> dict[str, Any]:
    now_ms = str(int(time.time() * 1000))
    attributes = {
        "ApproximateReceiveCount": "1",
        "SentTimestamp": now_ms,
        "SenderId": "AIDAEXAMPLE",
        "ApproximateFirstReceiveTimestamp": now_ms,
    }
    if queue_arn.endswith(".fifo"):
        attributes |= {"MessageGroupId": "bench", "MessageDeduplicationId": now_ms}
    record = {
        "messageId": "00000000-0000-0000-0000-000000000001",
        "receiptHandle": "bench",
        "body": body,
        "attributes": attributes,
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": "us-east-1",
    }
    return {"Records": [record]}


def timer_event(detail: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "version": "0",
        "id": "00000000-0000-0000-0000-000000000002",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2026-01-01T00:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/bench"],
        "detail": detail or {},
    }


def http_event(path: str) -> dict[str, Any]:
    user = "arn:aws:iam::123456789012:user/bench"
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"content-type": "application/json"},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "bench",
            "domainName": "bench.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "bench",
            "http": {
                "method": "GET",
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "bench",
            },
            "requestId": "bench",
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000",
            "timeEpoch": 1767225600000,
            "authorizer": {"iam": {"userArn": user, "accountId": "123456789012"}},
        },
        "isBase64Encoded": False,
    }


def events(resources: LocalResources) -> dict[str, dict[str, Any]]:
    """One real-shaped event per function, keyed by its logical id."""
    by_function = {q.function.logical_id: q for q in resources.queues if not q.raw_events}
    out: dict[str, dict[str, Any]] = {}
    for logical_id, spec in resources.functions.items():
        module = spec.handler.rsplit(".", 2)[-2]
        if module == "api":
            out[logical_id] = http_event("/pools")
        elif module in ("schedule", "scale_up") and logical_id in by_function:
            # A launch for a record that does not exist: the handler reads it and stops,
            # with the same imports, composition and clients as a real launch.
            command = Schedule("bench") if module == "schedule" else LaunchInstance("inst-x", 0)
            message = command.to_message()
            body = json.dumps({"kind": message.kind, "body": dict(message.body)})
            out[logical_id] = sqs_event(by_function[logical_id].queue_arn, body)
        elif module in ("idle_reap", "spot_reconcile"):
            out[logical_id] = timer_event()
    return out


def run_child(args: list[str], env: dict[str, str]) -> tuple[float, bool]:
    out = subprocess.run(
        [sys.executable, "-c", *args], env=env, capture_output=True, text=True, check=False
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("CORRAL-BENCH")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"{args[1] if len(args) > 1 else args}: {out.stderr[-2000:]}")
    _, seconds, boto3 = line.split()
    return float(seconds), boto3 == "1"


def samples(
    runs: int, probes: dict[str, tuple[list[str], dict[str, str]]]
) -> dict[str, list[float]]:
    """The seconds of each probe in each of ``runs`` interleaved rounds, after one discarded
    warm-up round (see the module docstring)."""
    seconds: dict[str, list[float]] = {name: [] for name in probes}
    for round_ in range(runs + 1):
        for name, (args, env) in probes.items():
            value, _ = run_child(args, env)
            if round_ > 0:
                seconds[name].append(value)
    return seconds


def paired_ratio(after: list[float], before: list[float]) -> float:
    """The median over rounds of after / before measured in the same round: a burst of load
    hits both sides of a pair, so this moves less than a ratio of two medians."""
    return statistics.median(a / b for a, b in zip(after, before, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--floor", action="store_true", help="also time the floor (see above)")
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout's functions/ directory: each handler is also timed from it in"
        " the same rounds, and the paired ratio printed (for before/after figures)",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also print what each handler's start is made of (see cold_start_breakdown.py)",
    )
    parser.add_argument(
        "--package",
        action="store_true",
        help="time each handler from the deployment package as functions/Makefile builds it"
        " (compiled .pyc) against the same package without bytecode (sam's pip workflow)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-cold-") as tmp:
        code, against, no_bytecode = REPO / "functions", args.against, False
        if args.package:
            from deploy_package import build

            code, against = build(Path(tmp) / "package")
            no_bytecode = True  # /var/task is read-only: nothing compiled at run time is kept
        server = MotoServer(Path(tmp) / "moto.log")
        server.start()
        try:
            return _measure(
                server.endpoint,
                Path(tmp),
                args.runs,
                floor=args.floor,
                breakdown=args.breakdown,
                code=code,
                against=against,
                no_bytecode=no_bytecode,
            )
        finally:
            server.stop()


def _measure(
    endpoint: str,
    tmp: Path,
    runs: int,
    *,
    floor: bool = False,
    breakdown: bool = False,
    code: Path = REPO / "functions",
    against: Path | None = None,
    no_bytecode: bool = False,
) -> int:
    import boto3

    base_env = {
        **aws_env(endpoint),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(code),
        "PYTHONDONTWRITEBYTECODE": "1" if no_bytecode else "",
        "POWERTOOLS_SERVICE_NAME": "corral",
        "POWERTOOLS_METRICS_NAMESPACE": "Corral",
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    }
    base_env = {k: v for k, v in base_env.items() if v}
    apply_aws_env(endpoint)  # this process too: every client it makes goes to moto
    session = boto3.Session(region_name="us-east-1")
    resources = create_from_template(TEMPLATE, session)
    session.client("ssm").put_parameter(
        Name=PARAMETER, Value=CONFIG.read_text(), Type="String", Overwrite=True
    )
    table = next(iter(resources.tables.values()))
    probes: dict[str, tuple[list[str], dict[str, str]]] = {
        "baseline": ([BASELINE_PROBE, table], base_env)
    }
    for logical_id, event in sorted(events(resources).items()):
        spec = resources.functions[logical_id]
        env = {**base_env, **spec.environment, "CORRAL_CLUSTER_CONFIG_PARAMETER": PARAMETER}
        env.pop("CORRAL_CLUSTER_CONFIG", None)  # as deployed: the config comes from SSM
        # The example config tags its instances for the local stack, not the stack default.
        env.pop("CORRAL_TAG_KEY", None)
        env.pop("CORRAL_TAG_VALUE", None)
        path = tmp / f"{logical_id}.json"
        path.write_text(json.dumps(event))
        name = spec.handler.rsplit(".", 1)[0]
        probes[name] = ([HANDLER_PROBE, spec.handler, str(path)], env)
        if against is not None:
            probes[f"{AGAINST}{name}"] = (
                [HANDLER_PROBE, spec.handler, str(path)],
                {**env, "PYTHONPATH": str(against.resolve())},
            )
    if floor:
        for name, step in FLOOR_STEPS.items():
            probes[name] = ([floor_probe(step), table, PARAMETER], base_env)
    measured = samples(runs, probes)
    result = {name: statistics.median(values) for name, values in measured.items()}
    baseline = result.pop("baseline")
    print(
        f"cold start to the first handled event, median of {runs} interleaved rounds of fresh"
        " interpreters (after one discarded warm-up round)"
    )
    print(f"{'function':34} {'seconds':>8} {'x baseline':>10}  verdict")
    print(f"{'baseline: import boto3 + 1 call':34} {baseline:8.3f} {1.0:10.2f}")
    worst = 0.0
    for name, seconds in result.items():
        ratio = seconds / baseline
        if name in FLOOR_STEPS or name.startswith(AGAINST):
            continue
        worst = max(worst, ratio)
        verdict = "ok" if ratio <= BUDGET else f"over {BUDGET}x"
        print(f"{name:34} {seconds:8.3f} {ratio:10.2f}  {verdict}")
    for name in FLOOR_STEPS:
        if name in result:
            print(f"{name:34} {result[name]:8.3f} {result[name] / baseline:10.2f}")
    if against is not None:
        print(f"against {against}: paired ratio this tree / that tree, median of {runs} rounds")
        for name in [n for n in result if n.startswith("corral.")]:
            other = measured[f"{AGAINST}{name}"]
            print(
                f"{name:34} {paired_ratio(measured[name], other):8.3f}"
                f" (that tree: {statistics.median(other) / baseline:.2f} x baseline)"
            )
    print(f"worst: {worst:.2f}x the baseline (bar: {BUDGET}x)")
    if breakdown:
        import cold_start_breakdown as parts

        handlers = [(n, p) for n, p in probes.items() if n == "baseline" or n.startswith("corral.")]
        runs_of: dict[str, list[parts.Breakdown]] = {name: [] for name, _ in handlers}
        for _ in range(runs):  # interleaved, as the timed rounds
            for name, (args, env) in handlers:
                runs_of[name].append(parts.run(args, env, sys.executable))
        print(f"\nwhat each start is made of: median of {runs} more runs each, under -X importtime")
        print(parts.table((name, parts.median(found)) for name, found in runs_of.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
