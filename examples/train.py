"""A real (small) training job for Corral's examples: logistic regression on a synthetic,
linearly separable-ish dataset, trained with mini-batch SGD on the CPU.

Pure Python on purpose: it runs on any agent (and in any ``python:3.x-slim`` image) with
nothing installed. It follows Corral's trial contract (docs/agent.md, agent_runtime/
trial_env.py):

- hyperparameters come from ``CORRAL_HPARAMS`` (JSON): ``learning_rate``, ``batch_size``,
  ``epochs``, optionally ``steps_per_epoch``, ``seconds_per_step`` (slows it down so demos can
  interrupt it midway) and ``checkpoint_every``;
- checkpoints go to ``CORRAL_CHECKPOINT_DIR`` every few steps, and after each one its path is
  written to ``$CORRAL_CHECKPOINT_DIR/latest`` so the agent can report it;
- a restarted trial gets that path back in ``CORRAL_LATEST_CHECKPOINT`` and resumes from it;
- SIGTERM (a spot interruption, a kill) finishes the current step, checkpoints and exits
  143, so the agent sees a stopped trial, not a finished one;
- metrics go through ``corral_trial`` (docs/metrics.md), which the agent puts on the trial's
  ``PYTHONPATH``: the training loss every step, ``validation_loss`` and ``accuracy`` (the
  experiment's ``searcher.metric``) every epoch. Run by hand, without it, they are printed only.

Run it by hand: ``CORRAL_HPARAMS='{"epochs": 2}' python examples/train.py``.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

try:
    import corral_trial  # on PYTHONPATH when an agent runs this (docs/metrics.md)
except ImportError:  # run by hand: metrics are printed only
    corral_trial = None

FEATURES = 8
SAMPLES = 2048


def hparams() -> dict[str, Any]:
    raw = os.environ.get("CORRAL_HPARAMS") or "{}"
    values = json.loads(raw)
    return {
        "learning_rate": float(values.get("learning_rate", 0.1)),
        "batch_size": int(values.get("batch_size", 32)),
        "epochs": int(values.get("epochs", 3)),
        "steps_per_epoch": int(values.get("steps_per_epoch", 20)),
        "seconds_per_step": float(values.get("seconds_per_step", 0.05)),
        "checkpoint_every": int(values.get("checkpoint_every", 5)),
        "seed": int(values.get("seed", 0)),
    }


def dataset(seed: int) -> tuple[list[list[float]], list[int]]:
    """A fixed random hyperplane labels Gaussian points, with 5% label noise."""
    rng = random.Random(seed)
    true_w = [rng.uniform(-2, 2) for _ in range(FEATURES)]
    xs, ys = [], []
    for _ in range(SAMPLES):
        x = [rng.gauss(0, 1) for _ in range(FEATURES)]
        y = int(sum(w * v for w, v in zip(true_w, x, strict=True)) > 0)
        ys.append(1 - y if rng.random() < 0.05 else y)
        xs.append(x)
    return xs, ys


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


def evaluate(w: list[float], b: float, xs: list[list[float]], ys: list[int]) -> tuple[float, float]:
    loss, correct = 0.0, 0
    for x, y in zip(xs, ys, strict=True):
        p = sigmoid(sum(wi * xi for wi, xi in zip(w, x, strict=True)) + b)
        loss -= y * math.log(p + 1e-12) + (1 - y) * math.log(1 - p + 1e-12)
        correct += int((p > 0.5) == bool(y))
    return loss / len(xs), correct / len(xs)


class Checkpoints:
    def __init__(self) -> None:
        self.dir = Path(os.environ.get("CORRAL_CHECKPOINT_DIR") or "checkpoints")
        self.dir.mkdir(parents=True, exist_ok=True)

    def load(self) -> dict[str, Any] | None:
        latest = os.environ.get("CORRAL_LATEST_CHECKPOINT")
        if not latest:
            return None
        path = Path(latest.removeprefix("file://"))
        if not path.exists():
            print(f"checkpoint {latest} not found: starting fresh", flush=True)
            return None
        return dict(json.loads(path.read_text()))

    def save(self, state: dict[str, Any]) -> Path:
        path = self.dir / f"step-{state['step']:06d}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(path)  # never a half-written checkpoint
        latest = self.dir / "latest"
        latest_tmp = self.dir / "latest.tmp"
        latest_tmp.write_text(f"{path}\n")
        latest_tmp.replace(latest)
        return path


def main() -> int:
    hp = hparams()
    xs, ys = dataset(hp["seed"])
    split = int(0.8 * len(xs))
    train, valid = (xs[:split], ys[:split]), (xs[split:], ys[split:])
    ckpt = Checkpoints()
    state = ckpt.load() or {"step": 0, "w": [0.0] * FEATURES, "b": 0.0}
    if state["step"]:
        print(
            f"resumed from step {state['step']} ({os.environ['CORRAL_LATEST_CHECKPOINT']})",
            flush=True,
        )
    stop = {"requested": False}
    rank = int(os.environ.get("NODE_RANK", "0"))

    def on_sigterm(signum: int, _frame: Any) -> None:
        stop["requested"] = True  # finish the current step, checkpoint, exit

    signal.signal(signal.SIGTERM, on_sigterm)
    rng = random.Random(hp["seed"] + state["step"])
    total = hp["epochs"] * hp["steps_per_epoch"]
    w, b = state["w"], state["b"]
    print(f"training: {json.dumps(hp, sort_keys=True)}, {total} steps", flush=True)
    while state["step"] < total:
        batch = rng.sample(range(split), min(hp["batch_size"], split))
        grad_w, grad_b, batch_loss = [0.0] * FEATURES, 0.0, 0.0
        for i in batch:
            x, y = train[0][i], train[1][i]
            p = sigmoid(sum(wi * xi for wi, xi in zip(w, x, strict=True)) + b)
            batch_loss -= y * math.log(p + 1e-12) + (1 - y) * math.log(1 - p + 1e-12)
            err = p - y
            grad_w = [g + err * xi for g, xi in zip(grad_w, x, strict=True)]
            grad_b += err
        w = [wi - hp["learning_rate"] * g / len(batch) for wi, g in zip(w, grad_w, strict=True)]
        b -= hp["learning_rate"] * grad_b / len(batch)
        state.update(step=state["step"] + 1, w=w, b=b)
        time.sleep(hp["seconds_per_step"])
        if corral_trial is not None:  # the helper reports from rank 0 only
            corral_trial.report_training(state["step"], loss=batch_loss / len(batch))
        if state["step"] % hp["steps_per_epoch"] == 0:
            loss, acc = evaluate(w, b, *valid)
            print(
                f"step {state['step']}/{total} validation_loss={loss:.4f} accuracy={acc:.3f}",
                flush=True,
            )
            if corral_trial is not None:
                corral_trial.report_validation(state["step"], validation_loss=loss, accuracy=acc)
        if rank != 0:  # multi-agent trials: node rank 0 owns the checkpoints
            if stop["requested"]:
                return 143
            continue
        if stop["requested"] or state["step"] % hp["checkpoint_every"] == 0:
            path = ckpt.save(state)
            if stop["requested"]:
                print(f"SIGTERM: checkpointed step {state['step']} to {path}; exiting", flush=True)
                return 143
    loss, acc = evaluate(w, b, *valid)
    if rank == 0:
        ckpt.save(state)
    print(f"done: validation_loss={loss:.4f} accuracy={acc:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
