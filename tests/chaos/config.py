"""What a soak run does: the seed, the workload size, and which faults at which rates."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

# Every fault kind the soak can inject, by flag name (``--faults`` takes a subset).
FAULT_KINDS: dict[str, str] = {
    "crash": "a function dies just before or just after a store, cloud or queue call",
    "dup": "a queue message is delivered twice",
    "late": "a queue message is delivered late",
    "ec2": "RunInstances fails (capacity, throttling, vCPU quota, Unsupported)",
    "noregister": "a launched instance never registers (its agent never starts)",
    "spot": "a spot interruption with the two-minute warning",
    "spot_nowarn": "a spot instance vanishes without warning",
    "agent_kill": "an agent process dies for good (the instance keeps running)",
    "agent_restart": "systemd restarts an agent: a fresh process on the same instance",
    "heartbeat_drop": "heartbeats are lost (single ones, and silences of up to 150 s)",
    "user_kill": "a user kills an experiment while its trials run",
    "outage": "the API is unreachable for a while",
    "foreign": "instances Corral does not own exist from the start",
    "drain_arrivals": "new work arrives while an instance drains",
}


@dataclass(frozen=True)
class Rates:
    """Fault rates. ``*_per_hour`` are per live agent and simulated hour."""

    crash: float = 0.01  # per port call inside a function invocation
    dup: float = 0.10  # per delivered message
    late: float = 0.10  # per delivered message
    late_max_s: float = 90.0
    ec2: float = 0.25  # per RunInstances call
    noregister: float = 0.10  # per launched instance
    spot_per_hour: float = 0.50
    spot_nowarn_per_hour: float = 0.20
    agent_kill_per_hour: float = 0.15
    agent_restart_per_hour: float = 0.30
    heartbeat_drop: float = 0.05  # per heartbeat
    silence_per_hour: float = 0.30  # a run of dropped heartbeats, 30..150 s
    user_kill: float = 0.06  # per experiment
    outages: int = 2  # API outages in a run, 30..80 s each
    foreign: int = 3  # foreign instances (two with the tag key and another value)
    drain_arrivals: float = 0.10  # share of the experiments held back for drain windows


@dataclass(frozen=True)
class SoakConfig:
    seed: int = 1
    trials: int = 200
    faults: frozenset[str] = field(default_factory=lambda: frozenset(FAULT_KINDS))
    rates: Rates = field(default_factory=Rates)
    step_s: float = 5.0
    max_instances: int = 8
    idle_s: float = 120.0  # the pool's max_idle_agent_period
    # Simulated trial length (seconds) and the stop after which the run is declared stuck.
    min_duration_s: float = 120.0
    max_duration_s: float = 900.0
    max_sim_s: float = 6 * 3600.0
    spread_s: float = 3600.0  # arrivals (and API outages) spread over this long
    verbose: bool = False

    def on(self, kind: str) -> bool:
        return kind in self.faults

    def with_faults(self, kinds: frozenset[str]) -> SoakConfig:
        return replace(self, faults=kinds)


# The short variant inside `make test` (tests/chaos/test_chaos_short.py): `--short`.
SHORT = SoakConfig(seed=7, trials=20, min_duration_s=60.0, max_duration_s=240.0, spread_s=300.0)


def parse_faults(text: str) -> frozenset[str]:
    """``all``, ``none``, a comma list (``spot,crash``) or ``all,-crash,-dup``."""
    kinds: set[str] = set()
    for raw in (p.strip() for p in text.split(",")):
        if not raw:
            continue
        if raw == "all":
            kinds |= set(FAULT_KINDS)
        elif raw == "none":
            kinds.clear()
        elif raw.startswith("-"):
            kinds.discard(_known(raw[1:]))
        else:
            kinds.add(_known(raw))
    return frozenset(kinds)


def _known(kind: str) -> str:
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")
    return kind


def parse_rates(base: Rates, overrides: list[str]) -> Rates:
    """``name=value`` overrides of the default rates."""
    known = {f.name: f.type for f in fields(Rates)}
    changes: dict[str, Any] = {}
    for item in overrides:
        name, _, value = item.partition("=")
        if name not in known or not value:
            raise ValueError(f"bad rate {item!r}; known: {', '.join(known)}")
        changes[name] = int(value) if known[name] in (int, "int") else float(value)
    return replace(base, **changes)
