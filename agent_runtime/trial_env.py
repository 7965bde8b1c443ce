"""The environment contract between the agent and a trial (documented in docs/agent.md).

Precedence, lowest first: the agent's proxy settings and the cluster's port ranges
(``GLOO_PORT_RANGE``/``NCCL_PORT_RANGE`` from ``task_container_defaults``; an experiment may
narrow them), the experiment's ``environment_variables``, then the ``CORRAL_*`` / device /
rendezvous variables below, which a trial cannot override because the agent's bookkeeping
depends on them.

Checkpoints: the trial writes checkpoints under ``CORRAL_CHECKPOINT_DIR`` (a local directory;
for ``file://`` storage it *is* the storage, for ``s3://``/``gs://`` it is a staging directory
and the trial uploads to ``CORRAL_CHECKPOINT_URI`` itself). After each checkpoint it writes
the checkpoint's reference (a path or URI, one line) to ``$CORRAL_CHECKPOINT_DIR/latest``
(also given as ``CORRAL_LATEST_CHECKPOINT_FILE``). The agent reads that file and reports it;
the next run of the trial gets it back as ``CORRAL_LATEST_CHECKPOINT``.

Metrics (docs/metrics.md): the trial appends JSON lines to ``CORRAL_METRICS_FILE`` (on the
agents of node rank 0 only; elsewhere it is ``/dev/null``), or calls ``corral_trial``, a
helper module whose directory leads ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from corral.protocol.agent import TrialAssignment

LATEST_FILE = "latest"
HELPER_DIR = Path(__file__).resolve().parent / "trial_helper"  # holds corral_trial.py
HELPER_MOUNT = "/opt/corral/python"  # where a container sees it


def checkpoint_dir(assignment: TrialAssignment, work_dir: Path) -> Path:
    """Host directory for the trial's checkpoints (the same path inside a container)."""
    uri = urlparse(assignment.checkpoint.storage_uri)
    if uri.scheme == "file":
        return Path(unquote(uri.path))
    return work_dir / "trials" / assignment.trial_id / "checkpoints"


def read_latest(directory: Path) -> str | None:
    """The checkpoint the trial last declared, or None if it has not written one yet."""
    try:
        text = (directory / LATEST_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text.splitlines()[0].strip() if text else None


def trial_env(
    assignment: TrialAssignment,
    *,
    agent_id: str,
    checkpoint_path: Path,
    proxies: dict[str, str],
    in_container: bool,
    metrics_file: Path | None = None,
    gloo_port_range: str | None = None,
    nccl_port_range: str | None = None,
) -> dict[str, str]:
    a = assignment
    env: dict[str, str] = {**proxies}
    # Each variable from its own field: Determined's agent sets GLOO_PORT_RANGE from the NCCL
    # range, which opens the wrong ports for GLOO when the two differ.
    if gloo_port_range:
        env["GLOO_PORT_RANGE"] = gloo_port_range
    if nccl_port_range:
        env["NCCL_PORT_RANGE"] = nccl_port_range
    if a.checkpoint.endpoint_url:
        # S3-compatible storage (MinIO, ...): every current AWS SDK and the CLI send their S3
        # calls to AWS_ENDPOINT_URL_S3. Below the experiment's own variables, which may point
        # their SDK elsewhere (a dataset on AWS S3 itself).
        env["AWS_ENDPOINT_URL_S3"] = a.checkpoint.endpoint_url
    env.update(a.environment)
    helper = HELPER_MOUNT if in_container else str(HELPER_DIR)
    user_path = a.environment.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{helper}:{user_path}" if user_path else helper
    env.update(
        {
            "CORRAL_TRIAL_ID": a.trial_id,
            "CORRAL_EXPERIMENT_ID": a.experiment_id,
            "CORRAL_AGENT_ID": agent_id,
            "CORRAL_HPARAMS": json.dumps(a.hyperparameters, sort_keys=True),
            "CORRAL_CHECKPOINT_URI": a.checkpoint.storage_uri,
            "CORRAL_CHECKPOINT_DIR": str(checkpoint_path),
            "CORRAL_LATEST_CHECKPOINT_FILE": str(checkpoint_path / LATEST_FILE),
            "CORRAL_METRICS_FILE": str(metrics_file) if metrics_file else os.devnull,
        }
    )
    if a.checkpoint.endpoint_url:
        env["CORRAL_CHECKPOINT_ENDPOINT_URL"] = a.checkpoint.endpoint_url
    else:
        env.pop("CORRAL_CHECKPOINT_ENDPOINT_URL", None)
    if a.checkpoint.latest:
        env["CORRAL_LATEST_CHECKPOINT"] = a.checkpoint.latest
    else:
        env.pop("CORRAL_LATEST_CHECKPOINT", None)  # a fresh start, even if the user set it
    env.update(_devices(a.gpus, in_container))
    env.update(_torch(a))
    return env


def _devices(gpus: list[int], in_container: bool) -> dict[str, str]:
    host = ",".join(str(i) for i in gpus)
    # The NVIDIA runtime renumbers the devices it exposes from 0, so inside a container CUDA
    # sees 0..n-1; a bare process sees host indices. PCI_BUS_ID ordering makes CUDA's
    # numbering match nvidia-smi's, which is what the assignment's indices are.
    cuda = ",".join(str(i) for i in range(len(gpus))) if in_container else host
    return {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": cuda,
        "NVIDIA_VISIBLE_DEVICES": host if gpus else "void",
    }


def _torch(a: TrialAssignment) -> dict[str, str]:
    local = len(a.gpus) or 1
    r = a.rendezvous
    if r is None:
        return {
            "WORLD_SIZE": str(local),
            "LOCAL_WORLD_SIZE": str(local),
            "NNODES": "1",
            "NODE_RANK": "0",
            "GROUP_RANK": "0",
            "RANK": "0",
        }
    return {
        "MASTER_ADDR": r.master_addr,
        "MASTER_PORT": str(r.master_port),
        "WORLD_SIZE": str(r.world_size),
        "LOCAL_WORLD_SIZE": str(r.local_world_size),
        "NNODES": str(r.nnodes),
        "NODE_RANK": str(r.node_rank),
        "GROUP_RANK": str(r.node_rank),
        # Global rank of this node's first process: a launcher that starts one process per
        # local GPU gives its i-th process RANK + i (torchrun computes the same itself).
        # Exact when every node has LOCAL_WORLD_SIZE GPUs, which torchrun requires anyway.
        "RANK": str(r.node_rank * r.local_world_size),
    }
