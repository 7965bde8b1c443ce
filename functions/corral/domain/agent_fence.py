"""The stale-instance fence: which agent writes the control plane still takes.

An agent's credentials outlive its instance: on AWS the instance profile's keys stay valid
for hours after the instance is terminated, an EC2 identity document never expires, and a
partitioned agent may come back long after its trials were run elsewhere. Proving *which*
instance calls (``api.auth``) is not enough: every agent write (register aside, which has
its own admission states) is also checked against the records, and refused unless

1. the instance is live for its agent: IDLE, BUSY, DRAINING or STOPPING. A DRAINING agent
   still runs (or checkpoints) its trials and must report them; a STOPPING one (confirmed
   empty, being stopped into the warm pool) beats until its machine stops, and must not be
   told to shut down (on an instance whose shutdown behaviour is "terminate", that would
   lose it from the warm pool). TERMINATING, TERMINATED and LOST (its trials were requeued,
   it is terminated in the same pass) are fenced, and so is every state an agent never
   writes from (not registered yet, STOPPED). Refused with ``ShutDown`` (409): the agent
   stops and shuts its instance down.
2. for a write about a trial, the trial has not ended (COMPLETED, FAILED, CANCELLED).
   Refused with ``Ended`` (410): the agent forgets the trial. One exception, by design: the
   terminal status may overtake the run's last log batch (a failed flush), and says where
   the output ends (``log_end_seq``); lines up to there are still taken, none beyond, and
   none at all when the end is unknown.

The services also check that the trial was placed on the instance (``services.agents``).
"""

from __future__ import annotations

from corral.domain.errors import Ended, ShutDown
from corral.domain.instance import Instance, InstanceState
from corral.domain.trial import Trial

IS = InstanceState

# The states whose agent may heartbeat and report trials: registered, not on its way out.
AGENT_WRITE_STATES = frozenset({IS.IDLE, IS.BUSY, IS.DRAINING, IS.STOPPING})


def check_instance(record: Instance) -> None:
    """Raise ``ShutDown`` unless ``record``'s agent may still write."""
    if record.state not in AGENT_WRITE_STATES:
        name = record.cloud_id or record.id
        raise ShutDown(f"instance {name} is {record.state.value}: its writes are refused")


def check_trial(trial: Trial) -> None:
    """Raise ``Ended`` if ``trial`` has ended: nothing more is recorded for it."""
    if not trial.is_active:
        raise Ended(f"trial {trial.id} has ended ({trial.state.value}): its writes are refused")


def check_late_lines(trial: Trial, last_seq: int) -> None:
    """Log lines numbered up to ``last_seq`` for ``trial``: refused (``Ended``) if it has
    ended, unless they are the end of its output that its terminal status announced."""
    if trial.is_active:
        return
    end = trial.log_end_seq
    if end is None or last_seq > end:
        announced = "no more output" if end is None else f"its output ends at seq {end}"
        raise Ended(
            f"trial {trial.id} has ended ({trial.state.value}) and {announced}: "
            "its writes are refused"
        )
