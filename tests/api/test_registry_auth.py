"""An experiment's ``environment.registry_auth``: stored with it for the agents that pull its
image, never shown by the API or written in events, carried to the agent on the wire."""

from __future__ import annotations

import json

from corral.domain.config import ExperimentConfig
from corral.services.shared.assignment_spec import _registry_auth
from tests.services.harness import Cluster

from .conftest import ApiClient

SECRET = "s3cret-t0ken"
CONFIG = {
    "name": "private-image",
    "entrypoint": ["python", "train.py"],
    "environment": {
        "image": "registry.corp.example/team/train:1",
        "registry_auth": {
            "username": "robot",
            "password": SECRET,
            "serveraddress": "registry.corp.example",
        },
    },
}


def test_the_api_never_shows_the_password(api: ApiClient, cluster: Cluster) -> None:
    reply = api.post("/experiments", {"config": CONFIG})
    assert reply.status == 201, reply.text
    assert SECRET not in reply.text
    shown = reply.json["config"]["environment"]["registry_auth"]
    assert shown == {
        "username": "robot",
        "password": "**********",
        "serveraddress": "registry.corp.example",
        "email": None,
    }
    detail = api.get(f"/experiments/{reply.json['id']}")
    assert detail.status == 200 and SECRET not in detail.text
    assert SECRET not in json.dumps([e.message for e in cluster.store.events()])
    # Stored in the clear, for the agents that pull the image.
    stored = cluster.store.get_experiment(reply.json["id"])
    assert stored is not None
    assert stored.config["environment"]["registry_auth"]["password"] == SECRET


def test_the_assignment_carries_it_on_the_wire_only() -> None:
    config = ExperimentConfig.model_validate(CONFIG)
    assert SECRET not in repr(config)  # logs of a config never show it
    auth = _registry_auth(config)
    assert auth is not None and SECRET not in repr(auth)
    assert auth.model_dump(mode="json")["password"] == SECRET  # the heartbeat reply's JSON
    assert auth.docker_auth() == {
        "username": "robot",
        "password": SECRET,
        "serveraddress": "registry.corp.example",
    }
