"""Fixtures for every test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.adapters.aws import clients


@pytest.fixture(autouse=True)
def _fresh_aws_session() -> Iterator[None]:
    """Each test's AWS clients read its own environment (credentials, endpoint, moto's
    stubber), as boto3's default session does under ``mock_aws``: the adapters' session is
    process-wide (``corral.adapters.aws.clients``), so forget it around every test."""
    clients.reset()
    yield
    clients.reset()
