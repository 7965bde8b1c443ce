"""The simulation block: defaults, path-named errors, and draws that do not depend on the
policy."""

from __future__ import annotations

import pytest

from corral.domain.config import ConfigError
from corral.domain.offerings import CapacityType, Offering
from corral.sim.model import outages, simulation_config

SPOT = Offering("g.1", "zone-a", CapacityType.SPOT, 1, 0.4)
OD = Offering("g.1", "zone-a", CapacityType.ON_DEMAND, 1, 1.0)


def test_defaults_interrupt_spot_and_refuse_capacity_at_documented_rates() -> None:
    sim = simulation_config(None)
    assert sim.spot.interruptions_per_hour == 0.005
    assert sim.capacity.for_offering(SPOT).unavailable_fraction == 0.05
    assert sim.capacity.for_offering(OD).unavailable_fraction == 0.01
    assert sim.boot.mean == 180.0 and sim.checkpoint_interval == 1800.0


def test_errors_name_the_simulation_path() -> None:
    with pytest.raises(ConfigError) as caught:
        simulation_config(
            {"boot": {"mean": "2m", "jitter": "3m"}, "spot": {"interruptions_per_hour": 2}}
        )
    assert {(p.path, p.reason) for p in caught.value.problems} == {
        ("simulation.boot.jitter", "must be <= mean (boot times cannot be negative)"),
        ("simulation.spot.interruptions_per_hour", "must be <= 1.0"),
    }
    with pytest.raises(ConfigError, match=r"simulation\.typo: unknown field"):
        simulation_config({"typo": 1})


def test_outages_depend_on_the_seed_and_offering_only() -> None:
    sim = simulation_config(None)
    day = 30 * 86400.0
    one = outages(sim, [SPOT, OD], 0.0, day, seed=3)
    assert one == outages(sim, [OD, SPOT, SPOT], 0.0, day, seed=3)  # order, duplicates
    assert [o for o in one if o.offering_key == SPOT.key] == outages(sim, [SPOT], 0.0, day, 3)
    assert one != outages(sim, [SPOT, OD], 0.0, day, seed=4)
    down = sum(o.end - o.start for o in one if o.offering_key == SPOT.key)
    assert 0.0 < down / day < 0.15  # about 5 % of the time
