"""A bad ``--endpoint`` (or ``CORRAL_ENDPOINT``) is one line saying what is wrong, a non-zero
exit and never a traceback or an ``internal:`` error, whichever command is given it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.client import CliError, resolve_endpoint
from corral.cli.main import app
from corral.local.state import StateDir

COMMANDS = [
    ["agent", "list"],
    ["pool", "list"],
    ["experiment", "list"],
    ["trial", "describe", "exp-1.t0000"],
    ["events"],
]
BAD = {
    "foo": "not a URL",
    "http://": "no host",
    "http:": "no host",
    "http://[::1": "not a URL",
    "ftp://example.com": "http or https",
    "localhost:8080": "http or https",
    "http://127.0.0.1:99999": "port",
    "http://127.0.0.1:abc": "port",
    " ": "not a URL",
}


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(autouse=True)
def _no_local_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CORRAL_DEV_DIR", str(tmp_path / "dev"))
    monkeypatch.delenv("CORRAL_ENDPOINT", raising=False)
    monkeypatch.setenv("CORRAL_TOKEN", "t")


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("endpoint", sorted(BAD))
def test_a_bad_endpoint_is_one_line(command: list[str], endpoint: str) -> None:
    result = CliRunner().invoke(app, [*command, "--endpoint", endpoint])
    assert result.exit_code != 0
    out = result.output.strip()
    assert out.startswith("error: ") and "\n" not in out, out
    assert "internal" not in out and "Traceback" not in out, out
    assert "endpoint" in out and BAD[endpoint] in out, out


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_an_unreachable_endpoint_is_one_line(command: list[str]) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(app, [*command, "--endpoint", url])
    assert result.exit_code == 1
    out = result.output.strip()
    assert out.startswith(f"error: cannot reach {url}") and "\n" not in out, out


def test_a_bad_endpoint_from_the_environment_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_ENDPOINT", "foo")
    result = CliRunner().invoke(app, ["agent", "list"])
    assert result.exit_code != 0 and "'foo'" in result.output and "internal" not in result.output


def test_good_endpoints_resolve(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    assert resolve_endpoint("http://127.0.0.1:8080/", state).url == "http://127.0.0.1:8080"
    assert resolve_endpoint("https://api.example.com/v1", state).url == (
        "https://api.example.com/v1"
    )
    deployed = resolve_endpoint("https://abc123.execute-api.eu-west-1.amazonaws.com", state)
    assert deployed.sigv4_region == "eu-west-1"
    with pytest.raises(CliError):
        resolve_endpoint("foo", state)
