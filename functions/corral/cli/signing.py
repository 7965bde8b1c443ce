"""Signing requests for a deployed API with the caller's AWS credentials (SigV4, service
``execute-api``), shared by the CLI's client and the ``corral dashboard`` proxy."""

from __future__ import annotations

from typing import Any

from corral.cli.errors import CliError


class SigV4Signer:
    """SigV4 for API Gateway (``execute-api``), as the AWS CLI would sign."""

    def __init__(self, region: str, credentials: Any, service: str = "execute-api") -> None:
        self.region = region
        self._credentials = credentials  # botocore credentials; refreshable ones refresh
        self._service = service

    @classmethod
    def from_environment(cls, region: str) -> SigV4Signer:
        try:
            import boto3  # type: ignore[import-untyped]
        except ImportError:
            raise CliError(
                "signing for a deployed API needs boto3: pip install 'corral[aws]'"
            ) from None
        credentials = boto3.Session().get_credentials()
        if credentials is None:
            raise CliError("no AWS credentials found to sign requests (aws configure / SSO)")
        return cls(region, credentials)

    def sign(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str]
    ) -> dict[str, str]:
        from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
        from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]

        request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
        frozen = self._credentials.get_frozen_credentials()
        SigV4Auth(frozen, self._service, self.region).add_auth(request)
        return {k: str(v) for k, v in request.headers.items()}
