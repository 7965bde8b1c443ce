"""The schedule and reconcile paths at scale, against moto: one tick of each handler at
1,000 instances and 10,000 pending trials, next to the same at 100 and 1,000, with the
growth ratio of every figure.

Per tick it prints the wall time, the AWS API calls by operation (a botocore hook on every
client the Context uses) and the DynamoDB capacity the tick would consume on a real table.
moto's ``ConsumedCapacity`` is a constant per call, so the units are computed here from the
items read and written, the way DynamoDB bills on-demand tables:

- reads: each GetItem / BatchGetItem item rounded up to 4 KB, a Query page's items summed
  and then rounded up to 4 KB; eventually consistent reads (every GSI query, the heartbeat
  batch reads) cost half; a miss costs the minimum (0.5 or 1);
- writes: each item rounded up to 1 KB; TransactWriteItems costs twice that; each global
  secondary index holding the item costs one more write of its projection (reported apart
  as "index WCU"; an index key that changes costs one delete more, not counted: a lower
  bound).

The state is written straight through the store (``DynamoStore.commit`` in batches of 100)
and EC2 (``RunInstances`` in batches, then the record tag per instance): the instances are
registered agents, most of them BUSY with a RUNNING trial and the rest IDLE, each with a
fresh heartbeat; the pending trials come in experiments of 1,000. The pool allows 10 % more
instances than exist, so the first schedule tick assigns trials to the idle agents, plans
launches up to ``max_instances`` and writes every other pending trial's ``pending_reason``;
the second tick is the steady state (nothing changed since). Then one reconcile tick.

    .venv/bin/python benchmarks/scale_moto.py [--sizes 100:1000,1000:10000] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import cProfile
import io
import math
import os
import platform
import pstats
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for tests.*
from tests.moto_env import ACCOUNT, GPU_POOL_YAML_HEAD, HANDLER_ENV, REGION

MOTO_ENV = HANDLER_ENV | {
    "POWERTOOLS_LOG_LEVEL": "WARNING",  # the handlers log every id they touched
}
os.environ.pop("AWS_ENDPOINT_URL", None)
os.environ.update(MOTO_ENV)

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from corral.adapters.aws import dynamo_schema  # noqa: E402
from corral.adapters.memory import FakeClock  # noqa: E402
from corral.domain.instance import InstanceState, new_instance  # noqa: E402
from corral.domain.ownership import POOL_TAG, RECORD_TAG  # noqa: E402
from corral.domain.records import Experiment, Heartbeat, TrialReport  # noqa: E402
from corral.domain.trial import Placement, Trial, TrialState, new_trial  # noqa: E402
from corral.handlers.aws import composition, schedule, spot_reconcile  # noqa: E402
from corral.services.shared.service_context import Context  # noqa: E402

PREFIX = "corral-bench-"
TAG_KEY, TAG_VALUE = "managed-by", "corral-bench"
POOL = "gpu"
INSTANCE_TYPE = "g5.xlarge"  # 1 GPU: one 1-GPU trial per agent
IDLE_SHARE = 0.10  # agents with nothing to run; the rest are BUSY
HEADROOM = 0.10  # max_instances above the fleet that exists
TRIALS_PER_EXPERIMENT = 1000
EC2_BATCH = 100
CLUSTER_YAML = (
    GPU_POOL_YAML_HEAD
    + """\
      instance_type: {instance_type}
      spot: false
      network_interface:
        subnet_id: {subnet}
      tag_key: {tag_key}
      tag_value: {tag_value}
      max_instances: {max_instances}
      max_idle_agent_period: 10m
      max_agent_starting_period: 10m
"""
)


# ---- moto's transactions, without their quadratic cost ------------------------------------
def patch_moto_transactions() -> None:
    """moto 5.2.5 deep-copies the whole table once per *item* of a TransactWriteItems, to
    roll back if one condition fails: 100 records into a 10,000-item table copy a million
    items. Here an all-Put transaction has its conditions checked first (as moto does);
    when every one holds, nothing can roll back, so moto's own code runs with the copy
    skipped. Anything else goes to moto unchanged. Results and call counts are the same;
    only moto's wall time drops. Benchmark-only: the tests run moto as it is."""
    from moto.dynamodb import models
    from moto.dynamodb.comparisons import get_filter_expression

    original = models.DynamoDBBackend.transact_write_items

    class _NoCopy:
        @staticmethod
        def deepcopy(value: Any) -> Any:
            return value

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        keys = set()
        for entry in transact_items:
            if list(entry) != ["Put"]:
                return original(self, transact_items)
            op = entry["Put"]
            table = self.get_table(op["TableName"])
            key = {table.hash_key_attr: op["Item"][table.hash_key_attr]}
            if table.range_key_attr is not None:
                key[table.range_key_attr] = op["Item"][table.range_key_attr]
            ident = (op["TableName"], str(sorted(key.items())))
            condition = op.get("ConditionExpression")
            if ident in keys or (
                condition is not None
                and not get_filter_expression(
                    condition,
                    op.get("ExpressionAttributeNames"),
                    op.get("ExpressionAttributeValues"),
                ).expr(self.get_item(op["TableName"], key))
            ):
                return original(self, transact_items)  # it fails: moto's way, with copies
            keys.add(ident)
        models.copy = _NoCopy  # type: ignore[assignment]
        try:
            return original(self, transact_items)
        finally:
            models.copy = copy

    models.DynamoDBBackend.transact_write_items = transact_write_items


_METERS: list[Meter] = []  # the one whose tick moto's time is added to


def time_moto() -> None:
    """Add the time moto spends on each request (AWS's side of the call) to the tick."""
    from moto.core.botocore_stubber import BotocoreStubber

    original = BotocoreStubber.__call__

    def timed(stubber: Any, event_name: str, request: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(stubber, event_name, request, **kwargs)
        finally:
            for meter in _METERS:
                meter.tick.moto_s += time.perf_counter() - start

    BotocoreStubber.__call__ = timed  # type: ignore[method-assign]


# ---- DynamoDB capacity units ----------------------------------------------------------
def _number_size(text: str) -> int:
    digits = text.lstrip("-").replace(".", "").strip("0") or "0"
    return min(21, 1 + math.ceil(len(digits) / 2))


def value_size(value: Mapping[str, Any]) -> int:
    """Bytes DynamoDB counts for one attribute value (its documented sizing rules)."""
    ((kind, v),) = value.items()
    if kind == "S":
        return len(str(v).encode())
    if kind == "N":
        return _number_size(str(v))
    if kind == "B":
        return len(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in v)
    if kind == "NS":
        return sum(_number_size(n) for n in v)
    if kind == "BS":
        return sum(len(b) for b in v)
    if kind == "L":
        return 3 + sum(1 + value_size(e) for e in v)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(e) for k, e in v.items())
    raise ValueError(f"unknown attribute type {kind}")


def item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    return sum(len(name.encode()) + value_size(v) for name, v in item.items())


@dataclass
class _Index:
    keys: tuple[str, ...]
    keys_only: bool


@dataclass
class Tick:
    name: str
    wall_s: float = 0.0
    moto_s: float = 0.0  # of wall_s, inside moto (AWS's side of the calls)
    calls: Counter[str] = field(default_factory=Counter)
    rcu: float = 0.0
    wcu: float = 0.0
    index_wcu: float = 0.0
    result: str = ""

    def figures(self) -> dict[str, float]:
        out: dict[str, float] = {
            "wall s": self.wall_s,
            "moto s": self.moto_s,
            "ours s": self.wall_s - self.moto_s,
            "AWS calls": float(sum(self.calls.values())),
            "RCU": self.rcu,
            "WCU": self.wcu,
            "index WCU": self.index_wcu,
        }
        out.update({f"  {op}": float(n) for op, n in sorted(self.calls.items())})
        return out


class Meter:
    """Counts every call of the given clients and prices DynamoDB's in capacity units."""

    def __init__(self, prefix: str) -> None:
        self.tick = Tick("setup")
        self._indexes: dict[str, list[_Index]] = {}
        self._table_keys: dict[str, tuple[str, ...]] = {}
        for definition in dynamo_schema.table_definitions(prefix):
            name = definition["TableName"]
            self._table_keys[name] = tuple(k["AttributeName"] for k in definition["KeySchema"])
            self._indexes[name] = [
                _Index(
                    tuple(k["AttributeName"] for k in gsi["KeySchema"]),
                    gsi["Projection"]["ProjectionType"] == "KEYS_ONLY",
                )
                for gsi in definition.get("GlobalSecondaryIndexes", [])
            ]

    def install(self, clients: Mapping[str, Any]) -> None:
        for client in clients.values():
            client.meta.events.register("before-parameter-build", self._before)
        clients["dynamodb"].meta.events.register("after-call.dynamodb", self._after)
        _METERS[:] = [self]

    @contextlib.contextmanager
    def measure(self, name: str) -> Iterator[Tick]:
        self.tick = Tick(name)
        start = time.perf_counter()
        try:
            yield self.tick
        finally:
            self.tick.wall_s = time.perf_counter() - start

    # -- hooks
    def _before(
        self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        self.tick.calls[f"{model.service_model.endpoint_prefix}.{model.name}"] += 1
        if model.service_model.endpoint_prefix != "dynamodb":
            return
        context["bench_params"] = params
        if model.name == "PutItem":
            self._write(params["TableName"], params["Item"], 1)
        elif model.name == "TransactWriteItems":
            for entry in params["TransactItems"]:
                put = entry.get("Put")
                if put is not None:
                    self._write(put["TableName"], put["Item"], 2)
                else:  # Update / Delete / ConditionCheck: 2 x 1 KB, at least
                    self.tick.wcu += 2
        elif model.name == "BatchWriteItem":
            for table, requests in params["RequestItems"].items():
                for request in requests:
                    if "PutRequest" in request:
                        self._write(table, request["PutRequest"]["Item"], 1)
                    else:
                        self.tick.wcu += 1
        elif model.name in ("UpdateItem", "DeleteItem"):
            self.tick.wcu += 1

    def _write(self, table: str, item: Mapping[str, Any], factor: int) -> None:
        self.tick.wcu += factor * max(1, math.ceil(item_size(item) / 1024))
        for index in self._indexes.get(table, []):
            if all(k in item for k in index.keys):
                if index.keys_only:
                    keys = set(index.keys) | set(self._table_keys[table])
                    projected = item_size({k: v for k, v in item.items() if k in keys})
                else:
                    projected = item_size(item)
                self.tick.index_wcu += max(1, math.ceil(projected / 1024))

    def _after(self, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        params = context.get("bench_params") or {}
        if model.name == "GetItem":
            item = parsed.get("Item")
            size = item_size(item) if item else 0
            units = max(1, math.ceil(size / 4096))
            self.tick.rcu += units * (1.0 if params.get("ConsistentRead") else 0.5)
        elif model.name == "Query":
            size = sum(item_size(i) for i in parsed.get("Items", []))
            units = max(1, math.ceil(size / 4096))
            self.tick.rcu += units * (1.0 if params.get("ConsistentRead") else 0.5)
        elif model.name == "BatchGetItem":
            for table, request in params.get("RequestItems", {}).items():
                factor = 1.0 if request.get("ConsistentRead") else 0.5
                items = parsed.get("Responses", {}).get(table, [])
                misses = max(0, len(request.get("Keys", [])) - len(items))
                self.tick.rcu += factor * (
                    sum(max(1, math.ceil(item_size(i) / 4096)) for i in items) + misses
                )


# ---- the cluster ----------------------------------------------------------------------
@dataclass
class Cluster:
    ctx: Context
    clock: FakeClock
    meter: Meter
    ec2: Any


def _build(instances: int, headroom: float = HEADROOM) -> Cluster:
    ec2 = boto3.client("ec2", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    dynamo_schema.create_tables(boto3.client("dynamodb", region_name=REGION), PREFIX)
    subnet = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])[
        "Subnets"
    ][0]["SubnetId"]
    image = ec2.register_image(Name="corral-agent", RootDeviceName="/dev/sda1")["ImageId"]
    urls = {
        "CORRAL_SCHEDULE_QUEUE_URL": sqs.create_queue(
            QueueName="corral-bench-schedule.fifo", Attributes={"FifoQueue": "true"}
        )["QueueUrl"],
        "CORRAL_SCALE_UP_QUEUE_URL": sqs.create_queue(QueueName="corral-bench-scale-up")[
            "QueueUrl"
        ],
    }
    env = {
        composition.CONFIG_ENV: CLUSTER_YAML.format(
            image=image,
            instance_type=INSTANCE_TYPE,
            subnet=subnet,
            tag_key=TAG_KEY,
            tag_value=TAG_VALUE,
            max_instances=instances + max(1, int(instances * headroom)),
        ),
        composition.TABLE_PREFIX_ENV: PREFIX,
        composition.TAG_KEY_ENV: TAG_KEY,
        composition.TAG_VALUE_ENV: TAG_VALUE,
        **urls,
    }
    clock = FakeClock(start=time.time())  # moto stamps LaunchTime with the wall clock
    clients = {name: boto3.client(name, region_name=REGION) for name in ("dynamodb", "ec2", "sqs")}
    ctx = composition.context_from_env(env, clock=clock, clients=clients)
    meter = Meter(PREFIX)
    meter.install(clients)
    composition.build_context = lambda: ctx  # type: ignore[assignment]  # as the tests do
    return Cluster(ctx, clock, meter, ec2)


def _commit_all(ctx: Context, records: list[Any]) -> None:
    for start in range(0, len(records), 100):
        ctx.store.commit(records[start : start + 100])


def populate(cluster: Cluster, instances: int, pending: int) -> None:
    ctx, now = cluster.ctx, cluster.clock.now()
    offering = ctx.pools[POOL].offerings()[0]
    cloud_ids: list[str] = []
    tags = [
        {"Key": TAG_KEY, "Value": TAG_VALUE},
        {"Key": POOL_TAG, "Value": POOL},
        {"Key": "Name", "Value": "corral-agent"},
    ]
    for start in range(0, instances, EC2_BATCH):
        count = min(EC2_BATCH, instances - start)
        reply = cluster.ec2.run_instances(
            ImageId=ctx.pools[POOL].provider.image_id,  # type: ignore[attr-defined]
            InstanceType=INSTANCE_TYPE,
            MinCount=count,
            MaxCount=count,
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )
        cloud_ids += [i["InstanceId"] for i in reply["Instances"]]

    idle = int(instances * IDLE_SHARE)
    records: list[Any] = []
    running: list[Trial] = []
    agent_ids = [f"inst-{n:06d}" for n in range(instances)]
    for n, (record_id, cloud_id) in enumerate(zip(agent_ids, cloud_ids, strict=True)):
        cluster.ec2.create_tags(
            Resources=[cloud_id], Tags=[{"Key": RECORD_TAG, "Value": record_id}]
        )
        inst = new_instance(record_id, POOL, offering, now, "bench")
        inst = replace(inst.transition(InstanceState.REQUESTED, now, "bench"), requested_at=now)
        inst = replace(
            inst.transition(InstanceState.ALLOCATED, now, f"cloud instance {cloud_id}"),
            cloud_id=cloud_id,
            launched_at=now,
        )
        inst = replace(
            inst.transition(InstanceState.IDLE, now, "agent registered 1 GPU(s)"),
            registered_at=now,
            address=f"10.0.{n // 250}.{n % 250 + 1}",
        )
        if n >= idle:
            trial = new_trial(f"run-{n:06d}.t0000", f"run-{n:06d}", POOL, 1, now)
            trial = trial.assigned(Placement(((record_id, (0,)),)), now)
            trial = trial.transition(TrialState.RUNNING, now, "the agent started the container")
            running.append(trial)
            inst = inst.with_allocation(trial.id, (0,)).transition(
                InstanceState.BUSY, now, f"assigned {trial.id}"
            )
        records.append(inst)
    _commit_all(ctx, records)
    _commit_all(ctx, running)

    trials: list[Trial] = []
    experiments: list[Experiment] = []
    for e in range(math.ceil(pending / TRIALS_PER_EXPERIMENT)):
        exp_id = f"exp-{e:04d}"
        count = min(TRIALS_PER_EXPERIMENT, pending - e * TRIALS_PER_EXPERIMENT)
        batch = [new_trial(f"{exp_id}.t{t:04d}", exp_id, POOL, 1, now) for t in range(count)]
        trials += batch
        experiments.append(
            Experiment(
                id=exp_id,
                name=f"grid {e}",
                pool=POOL,
                submitted_at=now,
                config={"entrypoint": "python train.py"},
                trial_ids=tuple(t.id for t in batch),
            )
        )
    _commit_all(ctx, experiments)
    _commit_all(ctx, trials)
    by_agent = {t.placement.instance_ids[0]: t.id for t in running if t.placement}
    for agent_id in agent_ids:
        trial_id = by_agent.get(agent_id)
        reports = (TrialReport(trial_id, "running"),) if trial_id else ()
        ctx.store.put_heartbeat(Heartbeat(agent_id, now, trials=reports))


# ---- one size ---------------------------------------------------------------------------
class _Quiet:
    """The handlers print EMF metrics on stdout; keep them off the report."""

    def __enter__(self) -> None:
        self._redirect = contextlib.redirect_stdout(io.StringIO())
        self._redirect.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._redirect.__exit__(*exc)


def _timer_event() -> dict[str, Any]:
    return {
        "version": "0",
        "id": "bench-timer",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [f"arn:aws:events:{REGION}:{ACCOUNT}:rule/corral-bench"],
        "detail": {},
    }


@dataclass
class _LambdaContext:
    function_name: str = "corral-bench"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:corral-bench"
    aws_request_id: str = "bench"

    def get_remaining_time_in_millis(self) -> int:
        return 900_000


TICKS: list[tuple[str, Callable[..., dict[str, Any]]]] = [
    ("schedule tick 1 (burst)", schedule.handler),
    ("schedule tick 2 (steady)", schedule.handler),
    ("reconcile tick", spot_reconcile.handler),
]


def run_size(
    instances: int, pending: int, profile_to: str | None, headroom: float = HEADROOM
) -> list[Tick]:
    print(f"\n== {instances:,} instances, {pending:,} pending trials ==", flush=True)
    with mock_aws():
        cluster = _build(instances, headroom)
        started = time.perf_counter()
        populate(cluster, instances, pending)
        print(f"setup (not measured): {time.perf_counter() - started:.1f} s", flush=True)
        ticks = []
        for name, handler in TICKS:
            profiler = cProfile.Profile() if profile_to else None
            with cluster.meter.measure(name) as tick, _Quiet():
                if profiler:
                    profiler.enable()
                result = handler(_timer_event(), _LambdaContext())
                if profiler:
                    profiler.disable()
            tick.result = _summary(result)
            ticks.append(tick)
            print(
                f"{name:26} {tick.wall_s:7.2f} s (moto {tick.moto_s:6.2f})  "
                f"{sum(tick.calls.values()):6} calls  "
                f"RCU {tick.rcu:9.1f}  WCU {tick.wcu:8.0f}  index WCU {tick.index_wcu:7.0f}  "
                f"{tick.result}",
                flush=True,
            )
            if profiler and profile_to:
                slug = "-".join(name.replace("(", "").replace(")", "").split()[:3])
                path = f"{profile_to}-{instances}-{slug}.prof"
                profiler.dump_stats(path)
                print(f"    profile: {path}")
                _print_profile(profiler)
            cluster.clock.advance(1.0)
    return ticks


def _summary(result: Mapping[str, Any]) -> str:
    if "applied" in result:
        return f"applied {len(result['applied'])}, conflicts {result['conflicts']}"
    return "(see the calls)"


def _print_profile(profiler: cProfile.Profile) -> None:
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).sort_stats("cumulative")
    stats.print_stats(r"corral/(services|adapters|domain)", 12)
    lines = [x for x in out.getvalue().splitlines() if x.strip()]
    print("\n".join("    " + x for x in lines[-14:]))


def report(small: tuple[int, int, list[Tick]], large: tuple[int, int, list[Tick]]) -> None:
    (si, sp, s_ticks), (li, lp, l_ticks) = small, large
    print(f"\n== growth: {li:,} / {si:,} instances, {lp:,} / {sp:,} pending trials ==")
    for s_tick, l_tick in zip(s_ticks, l_ticks, strict=True):
        print(f"\n{s_tick.name}")
        print(f"  {'figure':30} {f'{si}/{sp}':>12} {f'{li}/{lp}':>12} {'ratio':>8}")
        s_fig, l_fig = s_tick.figures(), l_tick.figures()
        for key in sorted(set(s_fig) | set(l_fig), key=lambda k: (k.startswith(" "), k)):
            a, b = s_fig.get(key, 0.0), l_fig.get(key, 0.0)
            ratio = f"{b / a:8.1f}" if a else "       -"
            fmt = ".2f" if key.endswith(" s") else ",.1f" if "RCU" in key else ",.0f"
            print(f"  {key:30} {a:12{fmt}} {b:12{fmt}} {ratio}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="100:1000,1000:10000",
        help="INSTANCES:PENDING pairs, small first (default: %(default)s)",
    )
    parser.add_argument(
        "--headroom",
        type=float,
        default=HEADROOM,
        help="max_instances above the fleet, as a share of it (default: %(default)s)",
    )
    parser.add_argument(
        "--profile", metavar="PREFIX", help="cProfile each tick; write PREFIX-*.prof"
    )
    args = parser.parse_args()
    sizes = [tuple(int(x) for x in pair.split(":")) for pair in args.sizes.split(",")]
    print(
        f"scale_moto: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    patch_moto_transactions()
    time_moto()
    results = [(i, p, run_size(i, p, args.profile, args.headroom)) for i, p in sizes]
    if len(results) >= 2:
        report(results[0], results[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
