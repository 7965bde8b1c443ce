"""The region, account and environment of the tests (and benchmarks) that run Corral's AWS
code against moto in-process, and the head of the one-pool cluster config they deploy.

Constants and one helper, without importing pytest or boto3: ``benchmarks/scale_moto.py``
sets the environment from here before it imports boto3.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any
from unittest import mock

if TYPE_CHECKING:
    import pytest

REGION = "us-east-1"
ACCOUNT = "123456789012"

# Fake credentials and a region for boto3, and no default AMIs in moto's EC2 (thousands of
# them, slow to load and never used).
MOTO_ENV = {
    "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
}

# ... plus what Lambda sets for the handlers (AWS_REGION) and the template's metrics namespace.
HANDLER_ENV = MOTO_ENV | {
    "AWS_REGION": REGION,
    "POWERTOOLS_METRICS_NAMESPACE": "Corral",
}

# The first lines of a cluster config with one AWS pool named gpu, up to its AMI (a format
# string: ``{image}``); the rest of the provider block follows, indented by six spaces.
GPU_POOL_YAML_HEAD = """\
default_resource_pool: gpu
resource_pools:
  - name: gpu
    provider:
      type: aws
      region: us-east-1
      image_id: {image}
"""


def use_moto_env(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str] = MOTO_ENV) -> None:
    """Point boto3 at moto in-process for one test: ``env`` set, and no endpoint override
    (the local stack's moto server) left to redirect it."""
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def moto_environ(env: Mapping[str, str] = MOTO_ENV) -> AbstractContextManager[Any]:
    """The same, as a ``with`` block over ``os.environ`` (for harnesses and fixtures that
    have no monkeypatch): ``env`` set, and no endpoint override left to redirect boto3."""
    kept = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    return mock.patch.dict(os.environ, kept | dict(env), clear=True)
