"""Fixtures for every test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# The local stack's helpers assert with explanations; the browser and docs tests import them
# too, before tests/e2e/conftest.py would load, so they are registered here, first.
pytest.register_assert_rewrite("tests.e2e.local_stack")

from corral.adapters.aws import clients  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_aws_session() -> Iterator[None]:
    """Each test's AWS clients read its own environment (credentials, endpoint, moto's
    stubber), as boto3's default session does under ``mock_aws``: the adapters' session is
    process-wide (``corral.adapters.aws.clients``), so forget it around every test."""
    clients.reset()
    yield
    clients.reset()
