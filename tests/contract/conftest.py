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
2. Register it under a short name in ``STORE_FACTORIES`` or ``CLOUD_FACTORIES``. Every test
   taking ``store`` / ``store_factory`` / ``cloud_env`` / ``cloud`` then runs against it, with
   the name in the test id (``test_x[dynamodb]``).

The cloud suite only uses behaviour that real EC2, moto and Compute Engine all have (moto
ignores ClientToken and fills spot requests at once, so token idempotency and open spot
requests are not in it); what only the simulated cloud does is tested in tests/unit/adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import pytest

from corral.adapters.memory import FakeClock, InMemoryStore, SimulatedCloud, SimulatedCloudConfig
from corral.domain.offerings import CapacityType, Offering
from corral.ports.cloud import CloudProvider, CloudState
from corral.ports.store import Store

# ---- stores -------------------------------------------------------------------------------

StoreFactory = Callable[[], AbstractContextManager[Store]]


@contextmanager
def memory_store() -> Iterator[Store]:
    yield InMemoryStore()


STORE_FACTORIES: dict[str, StoreFactory] = {
    "memory": memory_store,
    # "dynamodb": dynamodb_store,    # mock_aws + the tables of infra/template.yaml
    # "firestore": firestore_store,  # Google's emulator; skips when gcloud is absent
}


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


CLOUD_FACTORIES: dict[str, CloudFactory] = {
    "simulated": simulated_cloud,
    # "ec2": ec2_under_moto,  # mock_aws; foreign instances via ec2.run_instances
}


@pytest.fixture(params=sorted(CLOUD_FACTORIES))
def cloud_env(request: pytest.FixtureRequest) -> Iterator[CloudHarness]:
    with CLOUD_FACTORIES[request.param]() as harness:
        yield harness


@pytest.fixture
def cloud(cloud_env: CloudHarness) -> CloudProvider:
    return cloud_env.cloud
