"""The GCE provider against the fake Compute Engine REST server (tests/fakes/gce_server.py),
for the cloud contract suite (registered in conftest.py).

The real ``google-cloud-compute`` client talks to the fake over loopback HTTP (REST
transport, anonymous credentials), so the request paths, JSON, pagers and error envelopes
are exercised; only Compute Engine itself is faked.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

from corral.domain.offerings import CapacityType

if TYPE_CHECKING:
    from tests.contract.conftest import CloudHarness

PROJECT = "corral-contract"
ZONE = "us-central1-a"
GCE_OWNERSHIP = ("managed-by", "corral-contract")
GCE_POOLS = ("gpu", "pool-a", "pool-b")
_foreign = itertools.count()


def gcp_block(**changes: object) -> object:
    from corral.domain.config.gcp import GcpProvider

    return GcpProvider.model_validate(
        {
            "type": "gcp",
            "project": PROJECT,
            "zone": ZONE,
            "boot_disk_source_image": "projects/corral/global/images/agent",
            "instance_type": {
                "machine_type": "n1-standard-8",
                "gpu_type": "nvidia-tesla-t4",
                "gpu_num": 1,
            },
            "spot": True,
            "label_key": GCE_OWNERSHIP[0],
            "label_value": GCE_OWNERSHIP[1],
            "master_url": "https://corral.example.com",
        }
        | changes
    )


@contextmanager
def gce_on_fake_server() -> Iterator[CloudHarness]:
    try:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import compute_v1  # noqa: F401
    except ImportError:  # pragma: no cover - the gcp extra installs it
        pytest.skip("google-cloud-compute is not installed (pip install 'corral[gcp]')")
    from corral.adapters.gcp.gce_provider import GCE_STATES, GceProvider
    from tests.contract.conftest import CloudHarness
    from tests.fakes.gce_server import FakeGceServer

    with FakeGceServer() as server:
        block = gcp_block()
        provider = GceProvider(
            dict.fromkeys(GCE_POOLS, block),
            client_options={"api_endpoint": server.endpoint},
            credentials=AnonymousCredentials(),
        )
        offerings = {o.capacity_type: o for o in block.offerings()}  # type: ignore[attr-defined]

        def add_foreign(tags: Mapping[str, str]) -> str:
            name = f"someone-else-{next(_foreign)}"
            server.state.add_instance(PROJECT, ZONE, name, dict(tags))
            return name

        def raw_state(name: str) -> object:
            status = server.state.status(name)
            return None if status is None else GCE_STATES[status]

        yield CloudHarness(
            cloud=provider,
            ownership=GCE_OWNERSHIP,
            on_demand=offerings[CapacityType.ON_DEMAND],
            spot=offerings[CapacityType.SPOT],
            add_foreign=add_foreign,
            raw_state=raw_state,  # type: ignore[arg-type]
            unknown_id="corral-agent-does-not-exist",
        )
