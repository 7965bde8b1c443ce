"""From `make run` to the first trial running, and the agent venv's first build.

Runs what `make run` runs (``corral dev up --config examples/cluster.yaml``, detached, the
default timers and boot delay) in a temporary state directory, submits
``examples/grid.yaml`` as soon as the API answers, and polls ``experiment describe`` until a
trial is RUNNING. Prints, in seconds from the ``dev up`` command: the API ready, the grid
submitted, the first trial running. Then ``corral dev down``.

``--tree DIR`` runs another checkout's code (PYTHONPATH=DIR/functions:DIR), for a before /
after comparison. ``--cold-cache`` points the agent venv cache (``CORRAL_AGENT_VENV_CACHE``)
at an empty directory, so the figure includes the venv's first build; otherwise the
developer's cache is used, as by a second `make run`. ``--venv-only`` times the agent venv's
build alone (``corral.local.agent_venv.agent_install`` into an empty cache).

    .venv/bin/python benchmarks/local_stack_first_trial.py [--tree DIR] [--cold-cache]
    .venv/bin/python benchmarks/local_stack_first_trial.py --venv-only
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
LIMIT_S = 300.0


def corral(env: dict[str, str], tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "corral.cli.main", *args],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        check=False,
    )


def first_trial(tree: Path, cold_cache: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="corral-first-trial-") as tmp:
        env = {
            **os.environ,
            "CORRAL_DEV_DIR": str(Path(tmp) / "dev"),
            "PYTHONPATH": f"{tree / 'functions'}:{tree}",
            "COLUMNS": "200",
        }
        env.pop("CORRAL_ENDPOINT", None)
        env.pop("CORRAL_TOKEN", None)
        if cold_cache:
            env["CORRAL_AGENT_VENV_CACHE"] = str(Path(tmp) / "agent-venvs")
        start = time.monotonic()
        up = corral(env, tree, "dev", "up", "--config", "examples/cluster.yaml", "--detach")
        ready = time.monotonic() - start
        if up.returncode != 0:
            raise SystemExit(f"dev up failed: {up.stderr.strip()}")
        try:
            created = corral(env, tree, "experiment", "create", "examples/grid.yaml", "--json")
            submitted = time.monotonic() - start
            experiment = json.loads(created.stdout)["id"]
            running = None
            while time.monotonic() - start < LIMIT_S:
                shown = corral(env, tree, "experiment", "describe", experiment, "--json")
                trials = json.loads(shown.stdout).get("trials") or []
                if any(t["state"] in ("RUNNING", "COMPLETED") for t in trials):
                    running = time.monotonic() - start
                    break
                time.sleep(0.5)
            print(
                f"  API ready {ready:6.1f} s   grid submitted {submitted:6.1f} s   "
                f"first trial running {running if running is None else f'{running:6.1f}'} s"
            )
        finally:
            corral(env, tree, "dev", "down", "--force")


def venv_only() -> None:
    sys.path[:0] = [str(HERE / "functions"), str(HERE)]
    from corral.local import agent_venv

    root = agent_venv.project_root()
    assert root is not None
    with tempfile.TemporaryDirectory(prefix="corral-agent-venv-") as tmp:
        start = time.monotonic()
        agent_venv.agent_install(root, Path(tmp))
        first = time.monotonic() - start
        start = time.monotonic()
        agent_venv.agent_install(root, Path(tmp))
        again = time.monotonic() - start
    print(f"  agent venv: first build {first:6.1f} s, cached {again:6.1f} s (the wheel's build)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=HERE)
    parser.add_argument("--cold-cache", action="store_true")
    parser.add_argument("--venv-only", action="store_true")
    args = parser.parse_args()
    print(
        f"local_stack_first_trial: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, tree {args.tree}"
    )
    if args.venv_only:
        venv_only()
    else:
        first_trial(args.tree.resolve(), args.cold_cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
