"""One contract suite, every adapter: the fakes stay honest because they pass the same tests.

How to add an adapter (the DynamoDB store, the Firestore store, the EC2 provider, ...):

1. Write a factory: a context manager that yields a ready adapter and cleans up on exit.
   Call ``pytest.skip(...)`` inside it when its prerequisites are absent (no moto, no
   ``gcloud`` for the Firestore emulator), so the suite still runs everywhere.
   - A store factory yields an empty store (fresh tables / a fresh emulator project).
     Keep it cheap: the property test builds one store per example.
   - A cloud factory yields a ``CloudHarness``: the provider under test plus what the suite
     needs to set up and observe the cloud behind it (two offerings valid in that cloud, a
     way to create an instance *outside* Corral, and a way to see an instance's raw state).
     For EC2 under moto: ``mock_aws()``, ``MOTO_EC2_LOAD_DEFAULT_AMIS=false``, a subnet and
     an AMI, foreign instances via a plain ``ec2.run_instances`` with the given tags.
   - A queue factory yields a ``QueueHarness`` (queue_harness.py): the Queue adapter plus a
     test-only consumer side (receive / delete by receipt / advance time), since the port
     itself only sends.
2. Register it under a short name in ``STORE_FACTORIES``, ``CLOUD_FACTORIES`` or
   ``QUEUE_FACTORIES``. Every test taking ``store`` / ``store_factory`` / ``cloud_env`` /
   ``cloud`` / ``queue_env`` then runs against it, with the name in the test id
   (``test_x[dynamodb]``).

The cloud suite only uses behaviour that real EC2, moto and Compute Engine all have, plus
capabilities a harness declares: launch-token idempotency is asserted where the backend has
it (the simulated cloud, the fake GCE server's requestId) and an expected failure on moto,
which ignores ClientToken; open spot requests are not in it (moto fills them at once). What
only the simulated cloud does is tested in tests/unit/adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from corral.adapters.memory import FakeClock, InMemoryStore, SimulatedCloud, SimulatedCloudConfig
from corral.domain.offerings import CapacityType, Offering
from corral.ports.cloud import CloudProvider, CloudState
from corral.ports.store import Store
from tests.contract.dynamo_harness import dynamodb_store
from tests.contract.firestore_harness import firestore_store, prestart, stop_emulator
from tests.contract.gce_harness import gce_on_fake_server
from tests.contract.pubsub_harness import prestart as prestart_pubsub
from tests.contract.pubsub_harness import pubsub_on_emulator
from tests.contract.pubsub_harness import stop_emulator as stop_pubsub
from tests.contract.queue_harness import (
    QueueHarness,
    memory_queue,
    memory_queue_as_pubsub,
    sqs_on_moto,
)
from tests.moto_env import moto_environ

# ---- stores -------------------------------------------------------------------------------

StoreFactory = Callable[[], AbstractContextManager[Store]]


@contextmanager
def memory_store() -> Iterator[Store]:
    yield InMemoryStore()


STORE_FACTORIES: dict[str, StoreFactory] = {
    "memory": memory_store,
    "dynamodb": dynamodb_store,  # mock_aws + the tables of dynamo_schema (tests/contract)
    "firestore": firestore_store,  # Google's emulator; skips when gcloud is absent
}


@pytest.fixture(scope="session", autouse=True)
def _firestore_emulator(request: pytest.FixtureRequest) -> Iterator[None]:
    """Boot the emulator early when firestore cases are selected (never for a run that
    needs none), so the JVM starts while other contract tests run; stop it at the end."""
    if any("[firestore" in item.nodeid for item in request.session.items):
        prestart()
    if any("[pubsub" in item.nodeid for item in request.session.items):
        prestart_pubsub()
    yield
    stop_emulator()
    stop_pubsub()


@pytest.fixture(params=sorted(STORE_FACTORIES))
def store_factory(request: pytest.FixtureRequest) -> StoreFactory:
    """The factory itself, for tests that need several fresh stores (property tests)."""
    return STORE_FACTORIES[request.param]


@pytest.fixture
def store(store_factory: StoreFactory) -> Iterator[Store]:
    with store_factory() as fresh:
        yield fresh


# ---- clouds -------------------------------------------------------------------------------


@dataclass
class CloudHarness:
    cloud: CloudProvider
    ownership: tuple[str, str]
    on_demand: Offering  # an offering this cloud can launch on demand
    spot: Offering  # ... and one it can launch as spot
    # Launch an instance outside Corral with exactly these tags; return its id.
    add_foreign: Callable[[Mapping[str, str]], str]
    # The raw state of any instance (ours or not); None once the cloud forgot it.
    raw_state: Callable[[str], CloudState | None]
    # An instance id in the cloud's own format that does not exist.
    unknown_id: str = "i-0123456789abcdef0"
    # Why this backend launches again on a repeated launch token (None: it honours tokens).
    token_gap: str | None = None


CloudFactory = Callable[[], AbstractContextManager[CloudHarness]]

SIM_ON_DEMAND = Offering("g5.xlarge", "subnet-a", CapacityType.ON_DEMAND, 1, 1.006)
SIM_SPOT = Offering("g5.xlarge", "subnet-a", CapacityType.SPOT, 1, 0.45)


@contextmanager
def simulated_cloud() -> Iterator[CloudHarness]:
    clock = FakeClock()
    config = SimulatedCloudConfig(ownership=("managed-by", "corral-contract"))
    cloud = SimulatedCloud(clock, config)

    def raw_state(cloud_id: str) -> CloudState | None:
        found = cloud.get(cloud_id)
        return None if found is None else found.state

    yield CloudHarness(
        cloud=cloud,
        ownership=config.ownership,
        on_demand=SIM_ON_DEMAND,
        spot=SIM_SPOT,
        add_foreign=lambda tags: cloud.add_foreign_instance("m5.large", tags),
        raw_state=raw_state,
    )


EC2_OWNERSHIP = ("managed-by", "corral-contract")
# The contract cases launch into these pools; the provider only launches for pools it knows.
EC2_POOLS = ("gpu", "pool-a", "pool-b")


@contextmanager
def ec2_under_moto() -> Iterator[CloudHarness]:
    """The EC2 provider against moto in-process: the default VPC's subnet and a registered
    AMI (moto would accept an unknown AMI, but its root device would not match ours)."""
    try:
        import boto3
        from moto import mock_aws
    except ImportError:  # pragma: no cover - the dev extra installs both
        pytest.skip("boto3/moto not installed")
    from corral.adapters.aws import clients
    from corral.adapters.aws.ec2_provider import EC2_STATES, Ec2Provider
    from corral.domain.config.aws import AwsProvider

    # No endpoint override (the local stack's moto server): this case is in-process.
    with moto_environ(), mock_aws():
        ec2: Any = boto3.client("ec2", region_name="us-east-1")
        subnet = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])[
            "Subnets"
        ][0]["SubnetId"]
        image = ec2.register_image(Name="corral-agent", RootDeviceName="/dev/sda1")["ImageId"]
        block = AwsProvider.model_validate(
            {
                "type": "aws",
                "region": "us-east-1",
                "image_id": image,
                "instance_type": ["g5.xlarge"],
                "network_interface": {"subnet_id": subnet},
                "spot": True,
                "tag_key": EC2_OWNERSHIP[0],
                "tag_value": EC2_OWNERSHIP[1],
            }
        )
        provider = Ec2Provider(
            dict.fromkeys(EC2_POOLS, block),
            client=clients.client("ec2", region_name="us-east-1"),  # as deployed: trimmed model
            api_url="https://api.example.com",
        )

        def add_foreign(tags: Mapping[str, str]) -> str:
            extra: dict[str, Any] = {}
            if tags:
                pairs = [{"Key": k, "Value": v} for k, v in tags.items()]
                extra["TagSpecifications"] = [{"ResourceType": "instance", "Tags": pairs}]
            response = ec2.run_instances(
                ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1, **extra
            )
            return str(response["Instances"][0]["InstanceId"])

        def raw_state(cloud_id: str) -> CloudState | None:
            pages = ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": [cloud_id]}])
            for reservation in pages["Reservations"]:
                for instance in reservation["Instances"]:
                    return EC2_STATES[instance["State"]["Name"]]
            return None

        yield CloudHarness(
            cloud=provider,
            ownership=EC2_OWNERSHIP,
            on_demand=Offering("g5.xlarge", subnet, CapacityType.ON_DEMAND, 1, 1.006),
            spot=Offering("g5.xlarge", subnet, CapacityType.SPOT, 1, 0.45),
            add_foreign=add_foreign,
            raw_state=raw_state,
            token_gap="moto ignores ClientToken (real EC2 returns the first instance)",
        )


CLOUD_FACTORIES: dict[str, CloudFactory] = {
    "simulated": simulated_cloud,
    "ec2": ec2_under_moto,
    "gce": gce_on_fake_server,  # google-cloud-compute against tests/fakes/gce_server.py
}


@pytest.fixture(params=sorted(CLOUD_FACTORIES))
def cloud_env(request: pytest.FixtureRequest) -> Iterator[CloudHarness]:
    with CLOUD_FACTORIES[request.param]() as harness:
        yield harness


@pytest.fixture
def cloud(cloud_env: CloudHarness) -> CloudProvider:
    return cloud_env.cloud


# ---- queues -------------------------------------------------------------------------------

QueueFactory = Callable[[], AbstractContextManager[QueueHarness]]

QUEUE_FACTORIES: dict[str, QueueFactory] = {
    "memory": memory_queue,  # the template's SQS queues (schedule FIFO, the rest standard)
    "memory-as-pubsub": memory_queue_as_pubsub,  # the same fake configured as Pub/Sub
    "sqs": sqs_on_moto,  # SqsQueue on moto, queues as infra/template.yaml declares them
    "pubsub": pubsub_on_emulator,  # Google's emulator; skips when gcloud is absent
}


@pytest.fixture(params=sorted(QUEUE_FACTORIES))
def queue_env(request: pytest.FixtureRequest) -> Iterator[QueueHarness]:
    with QUEUE_FACTORIES[request.param]() as harness:
        yield harness
