"""Report a trial's metrics to Corral: ``import corral_trial`` in any trial the agent runs.

    import corral_trial

    corral_trial.report_training(batches, loss=0.42)
    corral_trial.report_validation(batches, validation_loss=0.31, accuracy=0.9)

The agent puts this file's directory on the trial's ``PYTHONPATH`` and names a file in
``CORRAL_METRICS_FILE``; each call appends one JSON line to it,
``{"kind": "validation", "batches": 100, "values": {"loss": 0.31}}``, which the agent ships
to the control plane (docs/metrics.md). Programs in other languages append the same lines
themselves. Standard library only, Python 3.8 and later, so it runs in any image.

Only one process of a trial reports: with several processes (torchrun), the one whose
``RANK`` is 0; the others' calls do nothing. Outside Corral (no ``CORRAL_METRICS_FILE``)
calls do nothing either, so a training script runs the same by hand.
"""

from __future__ import annotations

import json
import math
import os
import sys

METRICS_FILE_ENV = "CORRAL_METRICS_FILE"
# A copy of the rules in corral.protocol.metrics (this file runs where Corral is not
# installed); tests/agent/test_metric_rules.py checks the two agree.
KINDS = ("training", "validation")
MAX_NAME = 64

_warned = set()


def _enabled():
    return bool(os.environ.get(METRICS_FILE_ENV)) and os.environ.get("RANK", "0") in ("", "0")


def valid_name(name):
    """1 to ``MAX_NAME`` printable characters: the agent drops a line with another name."""
    return 0 < len(name) <= MAX_NAME and name.isprintable()


def report(kind, batches, **values):
    """Append one point: ``kind`` is "training" or "validation", ``batches`` how many batches
    the model has trained on, ``values`` numbers by name. NaN and inf values are left out
    (with one warning per name on stderr), and so are integers too large for a float.
    Returns True if a line was written."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 0:
        raise ValueError(f"batches must be a whole number >= 0, got {batches!r}")
    kept = {}
    for name, value in values.items():
        if not valid_name(name):
            raise ValueError(f"bad metric name {name[:80]!r} (1 to {MAX_NAME} printable chars)")
        try:
            number = float(value)  # numpy and torch scalars too
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a number, got {value!r}") from None
        except OverflowError:  # an integer beyond any float: left out, as the agent does
            number = math.inf
        if math.isfinite(number):
            kept[name] = number
        elif name not in _warned:
            _warned.add(name)
            print(f"corral_trial: {name}={number} is not reported (not finite)", file=sys.stderr)
    if not kept or not _enabled():
        return False
    line = json.dumps({"kind": kind, "batches": batches, "values": kept}) + "\n"
    # One write of one line to a file opened for appending: lines of several writers
    # never interleave (O_APPEND), and every line is complete when the agent reads it.
    with open(os.environ[METRICS_FILE_ENV], "a", encoding="utf-8") as f:
        f.write(line)
    return True


def report_training(batches, **values):
    return report("training", batches, **values)


def report_validation(batches, **values):
    return report("validation", batches, **values)
