"""``make demo``: the local stack end to end in a few minutes, no cloud account.

Starts the stack (its own state directory, timers four times faster than the template's),
submits ``examples/grid.yaml``, follows it with progress bars, interrupts one busy spot
instance midway, waits until every trial has completed and the idle instances are reaped
back to ``min_instances``, prints a summary and exits 0 (1 if any step fails or times out).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

from corral.cli import render
from corral.cli.client import ApiClient, CliError, Endpoint
from corral.cli.experiment_cmd import follow_experiment
from corral.local import faults
from corral.local.stack import DevStack, StackOptions
from corral.local.state import StateDir

log = logging.getLogger("corral.demo")


class Interrupter:
    """Interrupts one busy spot instance once its trial has run ``after_s`` seconds."""

    def __init__(self, stack: DevStack, after_s: float, notice_s: float) -> None:
        self._stack = stack
        self._after_s = after_s
        self._notice_s = notice_s
        self._running_since: dict[str, float] = {}
        self.interrupted: str | None = None
        self.trial: str | None = None

    def __call__(self, detail: dict[str, Any]) -> None:
        if self.interrupted:
            return
        now = time.monotonic()
        for trial in detail.get("trials") or []:
            if trial.get("state") != "RUNNING":
                continue
            since = self._running_since.setdefault(trial["id"], now)
            placement = trial.get("placement") or []
            ready = now - since >= self._after_s and len(placement) == 1
            # A trial on on-demand capacity is passed over: the next one may be on spot.
            if ready and self._interrupt(trial["id"], placement[0]["instance_id"]):
                return

    def _interrupt(self, trial_id: str, record_id: str) -> bool:
        """Interrupt the instance if it is a spot one (the pool falls back to on-demand,
        which EC2 never interrupts); whether it did."""
        import boto3  # type: ignore[import-untyped]

        assert self._stack.emulator is not None
        client = demo_client(self._stack)
        agents = client.get("/agents").get("instances") or []
        agent = next((a for a in agents if a["id"] == record_id), None)
        if not agent or not agent.get("cloud_id") or agent.get("capacity_type") != "spot":
            return False
        cloud_id = agent["cloud_id"]
        faults.interrupt(self._stack.state, boto3.DEFAULT_SESSION, cloud_id, self._notice_s)
        self.interrupted, self.trial = cloud_id, trial_id
        render.console.print(
            f"[magenta]>>> spot interruption warning for {cloud_id} (running {trial_id}); "
            f"terminated in {self._notice_s:.0f} s[/magenta]"
        )
        return True


def demo_client(stack: DevStack) -> ApiClient:
    return ApiClient(Endpoint(stack.api_url, stack.user_token))


def wait_for_min_instances(client: ApiClient, timeout_s: float) -> list[dict[str, Any]]:
    """Poll until every pool is back to its min_instances; returns the live instances."""
    deadline = time.monotonic() + timeout_s
    while True:
        pools = client.get("/pools").get("pools") or []
        live = client.get("/agents").get("instances") or []
        by_pool = {p["name"]: p["min_instances"] for p in pools}
        counts = {name: sum(1 for i in live if i["pool"] == name) for name in by_pool}
        if all(counts[name] <= minimum for name, minimum in by_pool.items()):
            return list(live)
        if time.monotonic() > deadline:
            raise CliError(f"idle instances not reaped within {timeout_s:.0f} s: {counts}")
        time.sleep(2.0)


def summary(client: ApiClient, detail: dict[str, Any], interrupter: Interrupter) -> list[str]:
    trials = detail.get("trials") or []
    everything = client.get("/agents", {"all": True}).get("instances") or []
    resumed = []
    for trial in trials:
        if trial.get("preemptions"):
            logs = client.get(f"/trials/{trial['id']}/logs", {"limit": 5000}).get("lines") or []
            if any("resumed from step" in line.get("line", "") for line in logs):
                resumed.append(trial["id"])
    survived = sum(1 for t in trials if t.get("preemptions") and t.get("state") == "COMPLETED")
    return [
        f"experiment {detail['id']}: {detail.get('state')}, "
        f"{render.by_state(detail.get('trials_by_state'))} of {len(trials)} trial(s)",
        # From the records (the emulator notices terminations only on its next poll).
        f"instances launched: {sum(1 for i in everything if i.get('cloud_id'))}, "
        f"terminated: {sum(1 for i in everything if i.get('state') == 'TERMINATED')}",
        f"interruptions: {1 if interrupter.interrupted else 0} injected "
        f"({interrupter.interrupted or '-'}), {survived} trial(s) survived one, "
        f"resumed from a checkpoint: {', '.join(resumed) or '-'}",
        f"GPU-hours: {detail.get('gpu_hours', 0):.4f}, "
        f"trial cost {render.money(detail.get('cost_usd'))}, "
        f"instance cost {render.money(sum(i.get('cost_usd') or 0 for i in everything))}",
    ]


def run(config: Path, experiment: Path, state: StateDir, timeout_s: float) -> int:
    started = time.monotonic()
    state.prepare()
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[logging.FileHandler(state.logs / "stack.log")],
        force=True,
    )
    options = StackOptions(cluster_config=config, state=state, timer_scale=0.25)
    stack = DevStack(options)
    try:
        stack.start()
        render.echo(stack.banner().splitlines()[0] + f" ({stack.api_url})")
        client = demo_client(stack)
        created = client.post("/experiments", {"config": experiment.read_text()})
        render.echo(f"submitted {created['id']}: {created.get('trial_count')} trials")
        interrupter = Interrupter(stack, after_s=6.0, notice_s=6.0)
        remaining = timeout_s - (time.monotonic() - started)
        detail = follow_experiment(
            client, created["id"], poll_s=1.0, timeout_s=remaining, on_poll=interrupter
        )
        if detail.get("state") != "COMPLETED":
            raise CliError(f"experiment ended {detail.get('state')}")
        render.console.print("all trials completed; waiting for idle instances to be reaped")
        wait_for_min_instances(client, timeout_s - (time.monotonic() - started))
        render.console.print("[bold]Summary[/bold]")
        for line in summary(client, detail, interrupter):
            render.echo(f"  {line}")
        render.console.print(f"demo finished in {time.monotonic() - started:.0f} s")
        return 0
    except CliError as exc:
        render.echo(f"demo failed: {exc.message} (logs: {state.logs})", err=True)
        return 1
    finally:
        stack.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", type=Path, default=Path("examples/cluster.yaml"))
    parser.add_argument("--experiment", type=Path, default=Path("examples/grid.yaml"))
    parser.add_argument("--state-dir", type=Path, default=Path(".corral/demo"))
    parser.add_argument("--timeout", type=float, default=280.0)
    args = parser.parse_args(argv)
    return run(args.config, args.experiment, StateDir(args.state_dir.absolute()), args.timeout)


if __name__ == "__main__":
    sys.exit(main())
