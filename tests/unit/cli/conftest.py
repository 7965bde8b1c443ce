"""The CLI against the real API routes: the Powertools resolver over an in-memory cluster,
served through the local stack's HTTP shim on loopback (tokens as in the local stack)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.api.app import build_resolver
from corral.api.auth import TokenAuthenticator
from corral.local.http_shim import HttpShim
from corral.local.lambda_host import LambdaContext
from tests.services.harness import Cluster

TOKEN = "user-token"


@pytest.fixture
def cluster() -> Cluster:
    """The deployment the ``api`` fixture serves; a module overrides it for another shape."""
    return Cluster()


@pytest.fixture
def api(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[tuple[str, Cluster]]:
    """The API over ``cluster`` on loopback, and the CLI pointed at it: (its URL, cluster)."""
    resolver = build_resolver(lambda: cluster.ctx, TokenAuthenticator({TOKEN: "me"}, b"s"))

    def invoke(event: dict[str, Any]) -> Any:
        return resolver.resolve(event, LambdaContext("ApiFunction", 20, "us-east-1"))

    shim = HttpShim(invoke, route_key="ANY /{proxy+}")
    shim.start()
    monkeypatch.setenv("CORRAL_DEV_DIR", str(tmp_path / "dev"))  # no local stack files
    monkeypatch.setenv("CORRAL_TOKEN", TOKEN)
    monkeypatch.setenv("CORRAL_ENDPOINT", shim.url)
    monkeypatch.setenv("COLUMNS", "200")
    yield shim.url, cluster
    shim.stop()
