"""A moto server on a free loopback port: the local stack's AWS endpoint.

A subprocess rather than ``ThreadedMotoServer``: the CLI (``corral dev interrupt``) and tests
talk to it from other processes anyway, and its own interpreter keeps moto's work off the GIL
the handlers, pollers and HTTP shim share on a small machine.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path

DEFAULT_REGION = "us-east-1"
FAKE_ACCOUNT = "123456789012"  # moto's default account
# The local cloud's agent images are the project's own (infra/agent-image, Amazon Linux
# 2023): their root device is /dev/xvda, where a launch's root_volume_size goes.
LOCAL_IMAGE_ROOT_DEVICE = "/dev/xvda"


def images_file(path: Path, image_ids: Iterable[str]) -> Path:
    """Write moto's ``MOTO_AMIS_PATH`` file: the AMIs every region of the server has.

    The pools' images must exist, as in an account: a launch reads the image's root device
    (DescribeImages) and an unknown image fails the launch. moto's RegisterImage can neither
    choose an id nor a root device, so the server loads them from this file at start (and
    again after a reset).
    """
    images = [
        {
            "ami_id": image_id,
            "name": f"corral-agent-{image_id}",
            "description": "Corral agent image (local stack)",
            "owner_id": FAKE_ACCOUNT,
            "public": False,
            "state": "available",
            "image_type": "machine",
            "architecture": "x86_64",
            "virtualization_type": "hvm",
            "hypervisor": "xen",
            "root_device_type": "ebs",
            "root_device_name": LOCAL_IMAGE_ROOT_DEVICE,
            "sriov": "simple",
        }
        for image_id in sorted(set(image_ids))
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(images, indent=1))
    return path


def pool_images(config: object) -> list[str]:
    """The image ids of a cluster config's AWS pools."""
    pools = getattr(config, "resource_pools", ())
    found = (getattr(pool.provider, "image_id", None) for pool in pools)
    return sorted({i for i in found if isinstance(i, str) and i})


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def aws_env(endpoint: str, region: str = DEFAULT_REGION) -> dict[str, str]:
    """What boto3 needs to talk to moto: the endpoint for every client and fake credentials
    (moto accepts anything; real ones must never reach it, nor the other way round)."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        # A shared ~/.aws profile must not redirect us to a real account.
        "AWS_PROFILE": "",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


def apply_aws_env(endpoint: str, region: str = DEFAULT_REGION) -> None:
    for key, value in aws_env(endpoint, region).items():
        if value:
            os.environ[key] = value
        else:
            os.environ.pop(key, None)


def wait_ready(endpoint: str, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2) as reply:
                if reply.status < 500:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    return False


def reset(endpoint: str) -> None:
    """Forget every resource (``POST /moto-api/reset``)."""
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=10):
        pass


class MotoServer:
    def __init__(self, log_file: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._log_file = log_file
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self, env: Mapping[str, str] | None = None, images: Iterable[str] = ()) -> None:
        """Start the server; ``images``: AMI ids it has in every region (``images_file``)."""
        child_env = {**os.environ, **(env or {})}
        # Default AMIs cost ~0.2 s per EC2 region touched and we never look them up.
        child_env.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
        wanted = list(images)
        if wanted:
            amis = images_file(self._log_file.parent / "moto-amis.json", wanted)
            child_env["MOTO_AMIS_PATH"] = str(amis)
        self._log_file.parent.mkdir(parents=True, exist_ok=True)
        with self._log_file.open("ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env,
                # Its own session: Ctrl-C in the terminal reaches the stack, which stops moto
                # last, after the handlers that still talk to it.
                start_new_session=True,
            )
        if not wait_ready(self.endpoint):
            self.stop()
            raise RuntimeError(f"moto did not start on {self.endpoint}; see {self._log_file}")

    def stop(self, timeout_s: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)
