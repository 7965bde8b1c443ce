"""Pools removed from the cluster config while Corral still holds instances in them.

The reaper and the reconciler act per configured pool, so an instance whose pool left the
config was seen by neither: an idle agent was never reaped, a stopped instance of a warm
pool never expired, a terminating record never confirmed, each billing on unseen (the
instance still carries our ownership tags, so it is ours to end). Both now also see every
pool their records, cloud listing or spot requests name, through a policy that winds it
down: no launches (``max_instances`` 0), agents drained and terminated as soon as they are
idle (trials already running finish first), stopped instances terminated (no warm pool),
no moves, and a launch that times out fails instead of being retried
(``launch_error_retries`` 0). The schedule pass cancels its launches not yet attempted.

Only records name a retired pool: an instance listed with our ownership tags but a pool no
record of this deployment knows may belong to another Corral installation sharing the tag
pair, and stays invisible.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from corral.domain.policy import PoolPolicy, StaticPool


class RetiredPool(StaticPool):
    """The policy of a pool that is no longer configured (see the module docstring)."""


def retired_pool(name: str) -> RetiredPool:
    return RetiredPool(
        name=name,
        offering_list=(),
        min_instances=0,
        max_instances=0,
        max_idle_s=0.0,
        launch_error_retries=0,
        on_demand_fallback=False,
        reap_fallback_early=False,
        fallback_after_s=None,
        consolidate=False,
        move_fallback_to_spot=False,
        warm_pool_size=0,
        max_stopped_s=0.0,
    )


def with_retired(pools: Mapping[str, PoolPolicy], named: Iterable[str]) -> dict[str, PoolPolicy]:
    """``pools`` and, for every name in ``named`` that is not configured, a retired pool."""
    out: dict[str, PoolPolicy] = dict(pools)
    for name in sorted(set(named) - set(pools)):
        out[name] = retired_pool(name)
    return out
