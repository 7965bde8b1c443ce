"""Adoption at registration (a launch that crashed before it recorded its cloud id): only the
instance the cloud lists for that record may claim it."""

from __future__ import annotations

import pytest

from corral.domain.errors import Forbidden, RetryLater
from corral.domain.instance import InstanceState
from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.protocol.agent import GpuInfo, Identity, IdentityKind, RegisterRequest
from corral.services import agents as agent_service

from .harness import Cluster
from .test_launching import crash_after_the_cloud_call, plan_one


def crashed_launch(cluster: Cluster) -> tuple[str, str]:
    """A REQUESTED record with no cloud id, and the tagged instance its launch made."""
    record_id = plan_one(cluster)
    crash_after_the_cloud_call(cluster, record_id)
    (made,) = cluster.cloud.all_instances()
    return record_id, made.cloud_id


def register(cluster: Cluster, cloud_id: str, record_id: str) -> str:
    request = RegisterRequest(
        cloud_id=cloud_id,
        record_id=record_id,
        identity=Identity(kind=IdentityKind.DEV, document="dev"),
        instance_type="g.1",
        zone="zone-a",
        private_ip="10.0.0.9",
        gpus=[GpuInfo(index=0, uuid="GPU-0", name="fake", memory_mib=1024)],
    )
    return agent_service.register(cluster.ctx, request, cloud_id).agent_id


def test_the_instance_launched_for_the_record_adopts_it_at_registration() -> None:
    cluster = Cluster()
    record_id, cloud_id = crashed_launch(cluster)
    cluster.clock.advance(60)  # booted
    assert register(cluster, cloud_id, record_id) == record_id
    adopted = cluster.store.get_instance(record_id)
    assert adopted is not None and adopted.cloud_id == cloud_id
    assert adopted.state is InstanceState.IDLE


def test_another_instance_cannot_claim_the_record_by_naming_it() -> None:
    cluster = Cluster()
    record_id, _ = crashed_launch(cluster)
    key, value = cluster.cloud.config.ownership
    # Ours (it carries the ownership tags and could prove its identity) but launched for
    # another record.
    other = cluster.cloud.add_foreign_instance(
        "g.1", {key: value, POOL_TAG: "gpu", RECORD_TAG: "inst-other"}, gpus=1
    )
    with pytest.raises(Forbidden):
        register(cluster, other, record_id)
    stuck = cluster.store.get_instance(record_id)
    assert stuck is not None and stuck.cloud_id is None and stuck.state is InstanceState.REQUESTED


def test_an_instance_the_cloud_does_not_list_yet_is_asked_to_retry() -> None:
    cluster = Cluster()
    record_id, _ = crashed_launch(cluster)
    unknown = "i-0000000000000dead"
    with pytest.raises(RetryLater):
        register(cluster, unknown, record_id)
    stuck = cluster.store.get_instance(record_id)
    assert stuck is not None and stuck.cloud_id is None
