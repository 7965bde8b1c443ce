"""moto's SQS in-process on a FakeClock: visibility timeouts, delays and retention follow
the test's clock instead of real time. Shared by the queue contract suite and the redrive
check of the template's queues."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from corral.adapters.memory import FakeClock
from tests.moto_env import REGION, moto_environ


@contextmanager
def sqs_on_a_fake_clock(clock: FakeClock) -> Iterator[Any]:
    """An SQS client of moto in-process, whose notion of now is ``clock``."""
    import boto3
    from moto import mock_aws

    # A stray endpoint (the local stack's) would send the client to a server, not to moto.
    with (
        moto_environ(),
        mock_aws(),
        mock.patch("moto.sqs.models.unix_time", lambda dt=None: clock.now()),
        mock.patch("moto.sqs.models.unix_time_millis", lambda dt=None: clock.now() * 1000.0),
    ):
        yield boto3.client("sqs", region_name=REGION)
