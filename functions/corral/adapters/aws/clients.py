"""Every boto3 client the AWS adapters create comes from here: one session per process (as
``boto3.client`` uses one default session) whose botocore data path starts with the trimmed
service models of :mod:`corral.adapters.aws.service_models`.

Creating a full EC2 client parses EC2's whole service model, more than ``import boto3``
costs; the trimmed one takes a tenth of that (docs/benchmarks.md, section 2). Everything
else about the session is boto3's default: the region, credentials and endpoint come from
the environment as they would for ``boto3.client``. ``AWS_DATA_PATH``, when set, is still
searched, after the trimmed models.

Tests that switch environments (moto's ``mock_aws`` replaces boto3's default session for
the same reason) call :func:`reset`.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from corral.adapters.aws.service_models import MODELS_DIR


@functools.cache
def session() -> Any:
    """The process's boto3 session over the trimmed models, created on first use."""
    import boto3  # type: ignore[import-untyped]  # lazily: keeps cold starts fast
    import botocore.session  # type: ignore[import-untyped]

    core = botocore.session.get_session()
    paths = [str(MODELS_DIR), os.environ.get("AWS_DATA_PATH", "")]
    core.set_config_variable("data_path", os.pathsep.join(p for p in paths if p))
    return boto3.session.Session(botocore_session=core)


def client(service: str, **kwargs: Any) -> Any:
    """``boto3.client(service, **kwargs)``, from :func:`session`."""
    return session().client(service, **kwargs)


def reset() -> None:
    """Forget the session: the next client reads the environment afresh."""
    session.cache_clear()
