"""``python -m tests.chaos --trials 200 --seed 1 [--faults all,-crash] [--rate crash=0.05]``

Prints the figures, each invariant's verdict and ``violations: N``; exits 1 if N > 0.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import replace

from tests.chaos.config import (
    FAULT_KINDS,
    SHORT,
    Rates,
    SoakConfig,
    parse_faults,
    parse_rates,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--trials", type=int, help="default 200 (--short: 20)")
    parser.add_argument("--seed", type=int, help="default 1 (--short: 7)")
    parser.add_argument(
        "--faults",
        default="all",
        help="all, none, a comma list, or all,-kind; kinds: " + ", ".join(FAULT_KINDS),
    )
    parser.add_argument("--rate", action="append", default=[], help="NAME=VALUE (see Rates)")
    parser.add_argument("--max-instances", type=int, default=8)
    parser.add_argument("--step", type=float, default=5.0, help="simulated seconds per step")
    parser.add_argument("--max-hours", type=float, default=6.0)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--short", action="store_true", help="the short variant inside make test")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the handlers' and agents' logs: thousands of lines
    base = SHORT if args.short else SoakConfig()
    cfg = replace(
        base,
        seed=base.seed if args.seed is None else args.seed,
        trials=base.trials if args.trials is None else args.trials,
        faults=parse_faults(args.faults),
        rates=parse_rates(Rates(), args.rate),
        step_s=args.step,
        max_instances=args.max_instances,
        max_sim_s=args.max_hours * 3600.0,
        verbose=args.verbose,
    )
    from tests.chaos.report import render
    from tests.chaos.soak import run_soak

    result = run_soak(cfg)
    print(render(result, verbose=args.verbose))
    return 1 if result.count else 0


if __name__ == "__main__":
    sys.exit(main())
