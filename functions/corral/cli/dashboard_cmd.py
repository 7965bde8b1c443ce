"""``corral dashboard``: open the web dashboard of any Corral API from this machine.

A deployed API is IAM-authorised and a browser cannot sign its requests, so this command
runs a signing proxy on 127.0.0.1 (``dashboard_proxy``) and prints the local link. Which
credentials the proxy adds depends on the endpoint (``--endpoint``, ``CORRAL_ENDPOINT`` or
the local stack, as every other command):

- an ``execute-api`` host, or ``--aws-region`` for a custom domain: SigV4 with the caller's
  AWS credentials (the default boto3 chain: env, profile, SSO), refreshed as they rotate;
- a Cloud Functions / Cloud Run host, or ``--google-audience``: a Google ID token for the
  API's URL (google-auth's ``fetch_id_token``, else ``gcloud auth print-identity-token``),
  renewed before it expires;
- anything else (the local stack): ``CORRAL_TOKEN`` or the stack's token, as a bearer token.
"""

from __future__ import annotations

import subprocess
import threading
import time
import urllib.parse
import webbrowser
from collections.abc import Callable
from typing import Annotated

import typer

from corral.cli import render
from corral.cli.client import CliError, Endpoint, resolve_endpoint
from corral.cli.dashboard_proxy import DashboardProxy, Signer
from corral.cli.signing import SigV4Signer

GOOGLE_HOSTS = (".run.app", ".cloudfunctions.net")
ID_TOKEN_REFRESH_S = 45 * 60.0  # Google ID tokens live an hour


class BearerSigner:
    def __init__(self, token: str) -> None:
        self._token = token

    def sign(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str]
    ) -> dict[str, str]:
        return {**headers, "authorization": f"Bearer {self._token}"}


def fetch_google_id_token(audience: str) -> str:
    """An ID token for ``audience``: Application Default Credentials that can mint one (a
    service account, the metadata server), else the gcloud CLI."""
    try:
        import google.auth.exceptions
        from google.auth.transport.requests import Request
        from google.oauth2 import id_token

        try:
            return str(id_token.fetch_id_token(Request(), audience))  # type: ignore[no-untyped-call]
        except google.auth.exceptions.DefaultCredentialsError:
            pass  # user credentials cannot mint ID tokens for an audience: ask gcloud
    except ImportError:
        pass
    argv = ["gcloud", "auth", "print-identity-token", f"--audiences={audience}", "--include-email"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CliError(f"cannot get a Google ID token: {exc}") from None
    if done.returncode != 0 or not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["no token"])[-1]
        raise CliError(f"cannot get a Google ID token (gcloud): {last}")
    return done.stdout.strip()


class GoogleIdTokenSigner:
    """A Google ID token for the API's URL, fetched once and renewed before it expires."""

    def __init__(
        self,
        audience: str,
        fetch: Callable[[str], str] = fetch_google_id_token,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.audience = audience
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._token: str | None = None
        self._fetched_at = 0.0

    def token(self) -> str:
        with self._lock:
            if self._token is None or self._clock() - self._fetched_at >= ID_TOKEN_REFRESH_S:
                self._token = self._fetch(self.audience)
                self._fetched_at = self._clock()
            return self._token

    def sign(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str]
    ) -> dict[str, str]:
        return {**headers, "authorization": f"Bearer {self.token()}"}


def choose_signer(
    endpoint: Endpoint, aws_region: str | None = None, google_audience: str | None = None
) -> Signer:
    """The credentials the proxy adds for this endpoint (see the module docstring)."""
    region = aws_region or endpoint.sigv4_region
    if region:
        return SigV4Signer.from_environment(region)
    host = (urllib.parse.urlsplit(endpoint.url).hostname or "").lower()
    if google_audience or (host.endswith(GOOGLE_HOSTS) and not endpoint.token):
        return GoogleIdTokenSigner(google_audience or endpoint.url)
    if endpoint.token:
        return BearerSigner(endpoint.token)
    raise CliError(
        f"no credentials for {endpoint.url}: set CORRAL_TOKEN, or pass --aws-region or "
        "--google-audience for a deployed API behind a custom domain",
        2,
    )


def dashboard(
    endpoint: Annotated[
        str | None, typer.Option(help="API URL (default: CORRAL_ENDPOINT or the local stack).")
    ] = None,
    port: Annotated[
        int,
        typer.Option(
            help="Local port (0: any free port).", callback=render.in_range(*render.PORT_RANGE)
        ),
    ] = 0,
    aws_region: Annotated[
        str | None, typer.Option(help="Sign with SigV4 for this region (custom domains).")
    ] = None,
    google_audience: Annotated[
        str | None, typer.Option(help="Send Google ID tokens for this audience.")
    ] = None,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the dashboard in the default browser.")
    ] = False,
) -> None:
    """Serve the web dashboard on 127.0.0.1, signing its API calls with your credentials."""
    with render.guard():
        resolved = resolve_endpoint(endpoint)  # checks the URL, names what is wrong
        signer = choose_signer(resolved, aws_region, google_audience)
        try:
            proxy = DashboardProxy(resolved.url, signer, port)
        except OSError as exc:
            raise CliError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
        render.echo(
            f"Corral dashboard for {resolved.url}\n"
            f"  open:  {proxy.page_url}\n"
            "  (listening on 127.0.0.1 only; Ctrl-C stops it)",
            soft_wrap=True,
        )
        if open_browser:
            webbrowser.open(proxy.page_url)
        try:
            proxy.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            proxy.stop()
