"""The user-facing HTTP API: request bodies and the read models every response is made of.

The CLI (``corral ... --json``) prints these models as they are, so field names are part of
the public contract: add fields, never rename or remove them. Times are float seconds since
the epoch (UTC), durations float seconds, money USD. Requests reject unknown keys (a typo in
``client_token`` must not silently make a retry create a second experiment); responses carry
every field, with ``null`` where a value is unknown, so clients need no defaults of their own.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainValidator

from corral.api.schemas.metrics import BestView, LatestMetrics
from corral.domain import text
from corral.domain.text import Argument, Token
from corral.protocol.metrics import MAX_NAME_LENGTH

# Query parameters (``corral.domain.text``: one line, not empty, bounded); min/max_length
# repeat the bounds for the OpenAPI document.
PoolQuery = Annotated[
    str, text.query(text.MAX_ID_CHARS), Field(min_length=1, max_length=text.MAX_ID_CHARS)
]
OwnerQuery = Annotated[
    str, text.query(text.MAX_QUERY_CHARS), Field(min_length=1, max_length=text.MAX_QUERY_CHARS)
]
MetricQuery = Annotated[
    str, text.query(MAX_NAME_LENGTH), Field(min_length=1, max_length=MAX_NAME_LENGTH)
]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


# ---- requests -------------------------------------------------------------------------------
def _mapping_or_text(value: object) -> dict[str, Any] | str:
    # One error at ``config`` (not one per union member, ``config.str`` and the like).
    if isinstance(value, dict | str):
        return value
    raise ValueError("must be a mapping or the YAML text of the config")


ConfigInput = Annotated[
    dict[str, Any] | str,
    PlainValidator(_mapping_or_text, json_schema_input_type=dict[str, Any] | str),
]


class CreateExperimentRequest(_Request):
    config: ConfigInput = Field(
        description="The experiment config: a mapping, or the YAML text of the file"
    )
    client_token: Token | None = Field(
        default=None,
        min_length=1,
        max_length=text.MAX_TOKEN_CHARS,
        description="Makes the submission idempotent: a retry with the same token returns "
        "the experiment the first call created (200) instead of creating another (201)",
    )


class RunCommandRequest(_Request):
    config: ConfigInput = Field(
        default_factory=dict, description="A command config (Determined's command.yaml)"
    )
    argv: list[Argument] = Field(
        default_factory=list,
        description="The command line; empty: the config's entrypoint. Any text but NUL",
    )
    client_token: Token | None = Field(default=None, min_length=1, max_length=text.MAX_TOKEN_CHARS)


# ---- errors ---------------------------------------------------------------------------------
class FieldError(_View):
    field: str = Field(description="Dotted path of the wrong field ('' = the whole document)")
    reason: str


class ErrorBody(_View):
    message: str
    errors: list[FieldError] | None = None


# ---- shared pieces --------------------------------------------------------------------------
class HistoryItem(_View):
    state: str
    at: float
    reason: str


class PlacementPart(_View):
    instance_id: str
    gpus: list[int]


# ---- trials and experiments -----------------------------------------------------------------
class TrialView(_View):
    id: str
    experiment_id: str
    owner: str | None = Field(
        default=None, description="Who submitted its experiment (null on older records)"
    )
    pool: str
    state: str
    slots: int
    priority: int
    submitted_at: float
    pending_reason: str | None = Field(
        description="Why the trial is not running (null while it runs or once it ended)"
    )
    placement: list[PlacementPart]
    restarts: int = Field(description="User-error restarts used (lost instances never count)")
    max_restarts: int
    preemptions: int = Field(description="Times infrastructure took its GPUs away")
    latest_checkpoint: str | None
    exit_code: int | None
    cost_usd: float = Field(description="Its share of instance cost so far (estimate)")
    gpu_hours: float
    hyperparameters: dict[str, Any]
    ran_on: list[str]
    history: list[HistoryItem]
    latest_metrics: LatestMetrics = Field(
        default_factory=LatestMetrics, description="The last values it reported, per kind"
    )
    best_value: float | None = Field(
        default=None, description="Its best validation value of searcher.metric, if any"
    )


class TrialList(_View):
    trials: list[TrialView]
    total: int = Field(description="Trials in the experiment")
    next_offset: int | None = Field(
        default=None, description="Pass as offset for the next page; null on the last page"
    )


class ExperimentView(_View):
    id: str
    name: str
    pool: str
    state: str = Field(description="Derived from the trials and the kill flag")
    owner: str | None = Field(
        description="Who submitted it: an IAM ARN, a Google email or a local-stack user name "
        "(null on records older than owners); only they and admins may kill it"
    )
    is_command: bool
    submitted_at: float
    killed_at: float | None
    trial_count: int
    trials_by_state: dict[str, int]
    cost_usd: float
    gpu_hours: float
    best: BestView | None = Field(
        default=None,
        description="The trial with the best validation value of searcher.metric (by "
        "smaller_is_better; ties go to the earlier trial); null until one reports it",
    )


class ExperimentDetail(ExperimentView):
    config: dict[str, Any]
    trials: list[TrialView] = Field(
        description="The first trials only (a Lambda response holds 6 MB); page through "
        "all of them with GET /experiments/{id}/trials"
    )
    trials_truncated: bool = False


class ExperimentList(_View):
    experiments: list[ExperimentView]
    truncated: bool = Field(
        default=False,
        description="With an owner filter: fewer than limit matches were found among the "
        "newest 10,000 experiments, and older ones were not searched",
    )


# ---- instances (agents) ---------------------------------------------------------------------
class InstanceView(_View):
    id: str
    pool: str
    state: str
    offering: str = Field(description="instance type|location|capacity type")
    instance_type: str
    location: str
    capacity_type: str
    slots: int
    free_slots: int
    hourly_price_usd: float
    cloud_id: str | None
    spot_request_id: str | None
    address: str | None
    created_at: float
    launched_at: float | None
    registered_at: float | None
    terminated_at: float | None
    idle_since: float | None
    idle_s: float | None = Field(description="How long it has been idle, if it is")
    cost_usd: float = Field(
        description="Billed so far: compute per second (60 s minimum) and the boot disk since"
        " the first launch (estimate)"
    )
    last_heartbeat_at: float | None
    heartbeat_age_s: float | None
    gpu_utilization_pct: list[float]
    gpu_memory_used_mib: list[float]
    trials: list[str]
    attempt: int
    last_error: str | None
    interruption_notice_at: float | None
    history: list[HistoryItem]


class InstanceList(_View):
    instances: list[InstanceView]


# ---- pools ----------------------------------------------------------------------------------
class OfferingView(_View):
    key: str
    instance_type: str
    location: str
    capacity_type: str
    slots: int
    hourly_price_usd: float
    available: bool = Field(description="False while the cloud recently refused it")
    unavailable_until: float | None


class BackoffView(_View):
    active: bool
    until: float | None
    failures: int
    reason: str | None


class BreakerView(_View):
    open: bool
    since: float | None
    boot_failures: int
    reason: str | None


class BudgetView(_View):
    spent_usd: float = Field(
        description="Month to date (UTC calendar month): compute and boot disks"
    )
    budget_usd: float | None
    remaining_usd: float | None
    exhausted: bool
    hourly_burn_usd: float


class PoolView(_View):
    name: str
    is_default: bool
    min_instances: int
    max_instances: int
    instances_by_state: dict[str, int] = Field(description="Live (non-terminal) instances")
    trials_pending: int
    trials_running: int
    trials_unserved: int = Field(
        description="Pending trials that no launch (planned or on its way) and no free room "
        "serves: they wait for the pool itself to change"
    )
    cannot_serve: str | None = Field(
        description="Why the pool cannot serve its queue now (at max_instances, budget "
        "reached, backed off, breaker open, offerings refused), with how many trials wait"
    )
    offerings: list[OfferingView]
    blocked_reason: str | None = Field(description="Why the pool launches nothing now")
    backoff: BackoffView
    breaker: BreakerView
    budget: BudgetView


class PoolList(_View):
    pools: list[PoolView]


# ---- event log and trial logs ---------------------------------------------------------------
class EventView(_View):
    at: float
    kind: str
    message: str
    pool: str | None
    instance_id: str | None
    trial_id: str | None
    experiment_id: str | None
    data: dict[str, Any]


class EventsPage(_View):
    events: list[EventView]
    next_since: float = Field(description="Pass as ?since= to get the events after this page")
    has_more: bool


class LogLineView(_View):
    seq: int
    at: float
    line: str
    stream: str


class LogsPage(_View):
    trial_id: str
    trial_state: str = Field(description="Terminal once trial_done")
    trial_done: bool
    exit_code: int | None = Field(description="The trial's exit code once it ended, if any")
    lines: list[LogLineView]
    next_after_seq: int = Field(description="Pass as ?after_seq= to get the next lines")
    has_more: bool
    log_end_seq: int | None = Field(
        description="Seq of the last line of the trial's output, once its agent reported the "
        "end (null: not known)"
    )
    logs_complete: bool = Field(
        description="The trial is done and this page reaches the end of its output: stop "
        "following. A done trial may still be incomplete for a moment (its agent's last "
        "lines are on their way)"
    )


# ---- agent endpoints that reply with more than the protocol's own models --------------------
class Accepted(_View):
    accepted: int = Field(description="Log lines accepted (duplicates are dropped silently)")


class StatusApplied(_View):
    applied: bool = Field(description="False when the trial is no longer this agent's")
    trial_state: str | None


class Health(_View):
    status: str
    time: float
