"""Metrics end to end in the local stack: ``examples/train.py`` reports through the
``corral_trial`` helper the real agent puts on its PYTHONPATH (nothing installed for it),
the agent ships the points with its heartbeats, and the CLI and API show the best trial;
and the agents put their (emulated) GPUs' metrics in moto's CloudWatch, signed with their
instance role, in the namespace the deployment gives the pools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.local.template import load_template, parameter_defaults
from tests.e2e.local_stack import ROOT, corral, corral_json, moto_client, wait_for

pytestmark = pytest.mark.e2e


def small_grid(tmp_path: Path) -> Path:
    """examples/grid.yaml with two short trials (about 4 s each)."""
    text = (ROOT / "examples" / "grid.yaml").read_text()
    text = text.replace("vals: [32, 64]", "vals: [32]").replace("epochs: 4", "epochs: 2")
    text = text.replace("seconds_per_step: 0.25", "seconds_per_step: 0.05")
    path = tmp_path / "small-grid.yaml"
    path.write_text(text)
    return path


def test_train_py_reports_metrics_and_the_best_trial_shows(stack: Path, tmp_path: Path) -> None:
    created = corral_json(stack, "experiment", "create", str(small_grid(tmp_path)))
    experiment_id = created["id"]
    assert created["trial_count"] == 2

    def finished() -> dict[str, Any] | None:
        detail = corral_json(stack, "experiment", "describe", experiment_id)
        return detail if detail["state"] == "COMPLETED" and detail["best"] else None

    detail = wait_for("a completed experiment with a best trial", finished, 180, poll=1.0)
    best = detail["best"]
    assert best["metric"] == "validation_loss" and 0 < best["value"] < 1
    values = {t["id"]: t["best_value"] for t in detail["trials"]}
    assert best["value"] == min(v for v in values.values() if v is not None)
    for trial in detail["trials"]:  # each epoch's validation and each step's training loss
        latest = trial["latest_metrics"]
        assert set(latest["validation"]) == {"validation_loss", "accuracy"}, trial
        assert set(latest["training"]) == {"loss"}, trial

    trial_id = best["trial_id"]
    page = corral_json(stack, "trial", "describe", trial_id)
    assert page["best_value"] == best["value"]
    described = corral(stack, "experiment", "describe", experiment_id)
    assert f"validation_loss={best['value']:.4g} ({trial_id})" in described.stdout

    # The agents put their GPUs' metrics in moto's CloudWatch, in the namespace the template
    # lets them use (AgentMetricsNamespace), one series per instance Corral launched.
    template = load_template(ROOT / "infra" / "template.yaml")
    namespace = parameter_defaults(template)["AgentMetricsNamespace"]
    reply = moto_client(stack, "ec2").describe_instances(
        Filters=[{"Name": "tag:managed-by", "Values": ["corral-local"]}]
    )
    launched = {i["InstanceId"] for r in reply["Reservations"] for i in r["Instances"]}
    cloudwatch = moto_client(stack, "cloudwatch")

    def reporting() -> set[str] | None:
        found = cloudwatch.list_metrics(Namespace=namespace, MetricName="GPUUtilization")
        dims = [{d["Name"]: d["Value"] for d in m["Dimensions"]} for m in found["Metrics"]]
        return {d["InstanceId"] for d in dims if d.get("Pool") == "default"} or None

    instances = wait_for(f"GPU metrics in moto's CloudWatch ({namespace})", reporting, 30)
    assert launched and instances <= launched
