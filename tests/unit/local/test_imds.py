"""An emulated instance's metadata service, read by the agent's own metadata client and by
botocore's credential provider (what the agent signs with), on loopback."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from agent_runtime.clock import SystemClock
from agent_runtime.config import load_config
from agent_runtime.identity import Ec2Metadata
from corral.local.credentials import CredentialStore
from corral.local.imds import TOKEN_HEADER, InstanceFacts, MetadataService

ACCOUNT = "123456789012"
INSTANCE = "i-0123456789abcdef0"


def facts(tmp_path: Path, *, role: str | None = "agent-role", tags: bool = False) -> InstanceFacts:
    return InstanceFacts(
        instance_id=INSTANCE,
        instance_type="g5.xlarge",
        zone="us-east-1b",
        region="us-east-1",
        account=ACCOUNT,
        image_id="ami-1",
        spot=True,
        private_ip="127.0.0.1",
        launched_at="2026-11-28T08:00:00Z",
        role=role,
        tags={"corral:pool": "gpu", "Name": "agent"} if tags else None,
        notice_file=tmp_path / "notice",
        rebalance_file=tmp_path / "rebalance",
    )


@pytest.fixture
def store() -> CredentialStore:
    return CredentialStore(ACCOUNT)


@pytest.fixture
def service(tmp_path: Path, store: CredentialStore) -> Iterator[MetadataService]:
    made = MetadataService(facts(tmp_path, tags=True), store)
    made.start()
    yield made
    made.stop()


def agent_metadata(url: str) -> Ec2Metadata:
    config = load_config(
        None,
        {
            "CORRAL_AGENT_API_URL": "x",
            "CORRAL_AGENT_AUTH": "aws",
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": url,
        },
    )
    return Ec2Metadata(config, SystemClock())


def test_imdsv2_only_every_read_needs_a_token(service: MetadataService) -> None:
    plain = requests.get(f"{service.url}/latest/meta-data/instance-id", timeout=5)
    assert plain.status_code == 401
    token = requests.put(
        f"{service.url}/latest/api/token",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
        timeout=5,
    ).text
    read = requests.get(
        f"{service.url}/latest/meta-data/instance-id", headers={TOKEN_HEADER: token}, timeout=5
    )
    assert read.text == INSTANCE
    no_ttl = requests.put(f"{service.url}/latest/api/token", timeout=5)
    assert no_ttl.status_code == 400


def test_the_agent_finds_its_identity_at_the_endpoint_its_environment_names(
    service: MetadataService,
) -> None:
    source = agent_metadata(service.url)
    identity = source.identity()
    assert identity.cloud_id == INSTANCE
    assert (identity.instance_type, identity.zone, identity.capacity_type) == (
        "g5.xlarge",
        "us-east-1b",
        "spot",
    )
    assert identity.region == "us-east-1"
    assert json.loads(identity.identity.document)["instanceId"] == INSTANCE
    assert identity.identity.signature


def test_the_agents_default_metadata_address_is_the_link_local_one() -> None:
    config = load_config(None, {"CORRAL_AGENT_API_URL": "x", "CORRAL_AGENT_AUTH": "aws"})
    assert config.ec2_metadata_url == "http://169.254.169.254"
    named = load_config(
        None,
        {
            "CORRAL_AGENT_API_URL": "x",
            "CORRAL_AGENT_AUTH": "aws",
            "CORRAL_AGENT_EC2_METADATA_URL": "http://a",
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://b",
        },
    )
    assert named.ec2_metadata_url == "http://a"  # the agent's own setting wins


def test_a_spot_notice_and_a_rebalance_recommendation_reach_the_agent(
    service: MetadataService, tmp_path: Path
) -> None:
    source = agent_metadata(service.url)
    assert source.notice() is None
    (tmp_path / "rebalance").write_text("")
    rebalance = source.notice()
    assert rebalance is not None and rebalance.kind == "rebalance"
    (tmp_path / "notice").write_text("10\n")  # what `corral dev interrupt` writes
    notice = source.notice()
    assert notice is not None and notice.kind == "spot-interruption"
    # The window from the notice's time (whole seconds, rounded up), not a default.
    assert 5 < notice.window_s <= 11


def test_role_credentials_are_what_botocore_finds_and_the_store_knows(
    service: MetadataService, store: CredentialStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import botocore.session

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", service.url)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    credentials = botocore.session.get_session().get_credentials()
    assert credentials is not None and credentials.method == "iam-role"
    frozen = credentials.get_frozen_credentials()
    known = store.find(frozen.access_key)
    assert known is not None
    assert known.session_arn == f"arn:aws:sts::{ACCOUNT}:assumed-role/agent-role/{INSTANCE}"
    assert (known.secret_access_key, known.token) == (frozen.secret_key, frozen.token)


def test_without_a_profile_there_are_no_credentials(tmp_path: Path, store: CredentialStore) -> None:
    bare = MetadataService(facts(tmp_path, role=None), store)
    bare.start()
    try:
        token = requests.put(
            f"{bare.url}/latest/api/token",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
            timeout=5,
        ).text
        reply = requests.get(
            f"{bare.url}/latest/meta-data/iam/security-credentials/",
            headers={TOKEN_HEADER: token},
            timeout=5,
        )
        assert reply.status_code == 404
    finally:
        bare.stop()


def test_tags_only_when_the_launch_exposed_them(
    service: MetadataService, tmp_path: Path, store: CredentialStore
) -> None:
    source = agent_metadata(service.url)
    assert source._get("meta-data/tags/instance") == "Name\ncorral:pool"
    assert source._get("meta-data/tags/instance/corral:pool") == "gpu"
    hidden = MetadataService(facts(tmp_path, tags=False), store)
    hidden.start()
    try:
        assert agent_metadata(hidden.url)._get("meta-data/tags/instance") is None
    finally:
        hidden.stop()


def test_credentials_are_renewed_before_they_expire() -> None:
    now = [1000.0]
    store = CredentialStore(ACCOUNT, clock=lambda: now[0])
    first = store.for_instance("r", INSTANCE)
    assert store.for_instance("r", INSTANCE) is first
    now[0] = first.expires_at - 60  # inside the renewal window: new ones, the old still valid
    second = store.for_instance("r", INSTANCE)
    assert second.access_key_id != first.access_key_id
    assert store.find(first.access_key_id) is not None
    now[0] = first.expires_at + 1
    assert store.find(first.access_key_id) is None
    store.revoke_instance(INSTANCE)
    assert store.find(second.access_key_id) is None
