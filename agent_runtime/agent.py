"""The agent's main loop, one ``run_once`` step at a time (tests step it with a fake clock).

Each step: handle a pending SIGTERM, register if not registered, check for an interruption
notice, advance the trials (reporting each state change at once), flush logs, heartbeat when
due (applying the start/stop/drain orders of the reply), and check the dead man's switch.
A short outage of the control plane never touches running trials: they keep running and
state is reported again once it answers. Past ``fence_after_s`` the trials are stopped (the
control plane runs them elsewhere by then); the dead man's switch ends the wait.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from importlib import metadata

from agent_runtime.client import ControlPlaneClient, ControlPlaneError, Unreachable
from agent_runtime.clock import Clock, Sleeper
from agent_runtime.config import ROLE_ARN, AgentConfig
from agent_runtime.deadman import DeadMansSwitch, Runner
from agent_runtime.executors import Executor
from agent_runtime.gpus import gpu_metrics
from agent_runtime.identity import InstanceIdentity, MetadataSource, Notice
from agent_runtime.interruptions import InterruptionWatcher, grace_for
from agent_runtime.logs import CloudWatchLogs, LogShipper, PermanentLogError
from agent_runtime.metrics import CloudWatchMetrics
from agent_runtime.trial_credentials import CredentialServer, TrialScope
from agent_runtime.trial_metrics import MetricsTailer, metrics_dir
from agent_runtime.trials import TrialRun, launch_spec
from corral.protocol.agent import (
    AgentTrialState,
    GpuInfo,
    GpuMetric,
    HeartbeatRequest,
    LogBatch,
    RegisterRequest,
    TrialAssignment,
    TrialStatus,
)

log = logging.getLogger(__name__)

EXIT_OK, EXIT_UNHEALTHY, EXIT_REFUSED, EXIT_DEADMAN = 0, 2, 3, 4
METRIC_POINTS_PER_HEARTBEAT = 500  # the rest waits in the trials' metrics files


def _version() -> str:
    try:
        return metadata.version("corral")
    except metadata.PackageNotFoundError:
        return "0"


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        identity: InstanceIdentity,
        gpus: list[GpuInfo],
        client: ControlPlaneClient,
        executor: Executor,
        source: MetadataSource,
        clock: Clock,
        sleeper: Sleeper,
        *,
        shutdown_runner: Runner | None = None,
        metrics: Callable[[], list[GpuMetric]] | None = None,
        credentials: CredentialServer | None = None,
    ) -> None:
        self.config, self.identity, self.gpus = config, identity, gpus
        self.client, self.executor, self.source = client, executor, source
        self.clock, self.sleeper = clock, sleeper
        # Serves each trial credentials of its own (None: trials get none from the agent).
        self.credentials = credentials
        self.agent_id: str | None = None
        self.trials: dict[str, TrialRun] = {}
        # What the control plane last said: its heartbeat reply is the truth, so a drain it
        # takes back (demand came back before the agent was terminated) is lifted here too.
        self.draining = False
        # This machine is going away (a preemption notice or SIGTERM), or was told to take
        # no new work by a rebalance recommendation (``rebalance_action: drain``): whatever
        # the control plane says, work sent anyway is handed back at once. Reported as
        # ``draining`` in heartbeats, so the control plane stops sending work here.
        self.leaving = False
        self.drain_notice = False
        self.exit_code: int | None = None
        self.interval = config.heartbeat_interval_s
        self.watcher = InterruptionWatcher(source, clock, config.interruption_poll_s)
        switch_s = config.dead_man_switch_s if config.dead_man_switch_s is not None else 600.0
        kw = {"runner": shutdown_runner} if shutdown_runner else {}
        self.deadman = DeadMansSwitch(clock, switch_s, config.shutdown_command, **kw)
        self.logs = LogShipper(clock)
        # Trial metrics ride on heartbeats; a malformed line is named in the trial's log.
        self.trial_metrics = MetricsTailer(
            clock, on_problem=lambda trial_id, line: self.logs.add(trial_id, "stderr", line)
        )
        self._metrics_recovered = False
        self._metrics = metrics or (lambda: gpu_metrics(config))
        self._cloudwatch: CloudWatchMetrics | None = None
        self._stop_requested = False
        self._exit_when_done: int | None = None
        self._exit_deadline: float | None = None
        self._failures = 0
        self._leftovers: list[str] | None = None  # None: not looked for yet
        # Trials the control plane said have ended (410) while they still ran here: stopped,
        # never reported again, forgotten once their process is gone.
        self._ended: set[str] = set()
        # Out of contact this long, stop the trials (the control plane says how long).
        self.fence_after_s: float | None = None
        now = clock.monotonic()
        self._next_register = self._next_heartbeat = self._next_flush = now

    # --- public ------------------------------------------------------------------------
    def request_stop(self) -> None:
        """SIGTERM/SIGINT handler: only sets a flag (and wakes the loop); work happens there."""
        self._stop_requested = True
        self.sleeper.wake()

    def run(self) -> int:
        while self.exit_code is None:
            self.run_once()
            if self.exit_code is None:
                self.sleeper.sleep(self.config.tick_s)
        return self.exit_code

    def run_once(self) -> None:
        if self.exit_code is not None:
            return
        now = self.clock.monotonic()
        if self._stop_requested:
            self._stop_requested = False
            log.warning(
                "SIGTERM: stopping trials (grace %.0f s) and exiting", self.config.stop_grace_s
            )
            window = self.config.stop_grace_s + self.config.interruption_margin_s
            self._interrupt(Notice("agent-sigterm", window), notify=False)
            self._finish(
                EXIT_OK, now + self.config.stop_grace_s + self.config.interruption_margin_s
            )
        if self._leftovers is None:
            self._leftovers = self.executor.stop_leftovers(self.config.stop_grace_s)
        if self.agent_id is None and self._exit_when_done is None and now >= self._next_register:
            self._register(now)
            if self.agent_id is not None:
                for trial_id in self._leftovers:  # the trials an earlier process left behind
                    self._hand_back(trial_id, "stopped: the agent restarted")
                self._leftovers = []
                self._recover_metrics()
        notice = self.watcher.poll()
        if notice is not None:
            self._interrupt(notice, notify=notice.action == "preempt")
        for run in list(self.trials.values()):
            if run.poll(now):
                if run.terminal:
                    self.trial_metrics.end_run(run.trial_id)  # its file is complete now
                self._send_status(run)
        if self.agent_id is not None and now >= self._next_flush:
            self._next_flush = now + self.config.log_flush_interval_s
            self.logs.flush(self._send_logs)
        if self.agent_id is not None and now >= self._next_heartbeat:
            self._heartbeat(now)
        self._fence(now)
        if self.deadman.check():
            self.exit_code = EXIT_DEADMAN
            return
        self._maybe_exit(now)

    # --- registration --------------------------------------------------------------------
    def _register_request(self, unhealthy_reason: str | None = None) -> RegisterRequest:
        i = self.identity
        return RegisterRequest(
            cloud_id=i.cloud_id,
            record_id=self.config.record_id,
            identity=i.identity,
            instance_type=i.instance_type,
            zone=i.zone,
            capacity_type=i.capacity_type,
            private_ip=i.private_ip,
            gpus=self.gpus,
            agent_version=_version(),
            unhealthy_reason=unhealthy_reason,
        )

    def report_unhealthy(self, reason: str) -> None:
        """Tell the control plane this machine must not run trials (it terminates the
        instance at once rather than after max_agent_starting_period). Best effort: the
        starting deadline reclaims the instance if the report never arrives."""
        try:
            self.client.register(self._register_request(unhealthy_reason=reason))
        except ControlPlaneError as exc:
            log.info("unhealthy report acknowledged: %s", exc)
        except Exception as exc:
            log.warning("could not report unhealthy: %s", exc)

    def _register(self, now: float) -> None:
        try:  # re-read: a GCE identity token lives an hour; a re-register needs a fresh one
            self.identity = self.source.identity()
        except Exception as exc:
            log.warning("identity re-read failed, using the first one: %s", exc)
        request = self._register_request()
        try:
            reply = self.client.register(request)
        except Unreachable as exc:
            self._failures += 1
            self._next_register = now + self.client.backoff(self._failures)
            log.warning("register: control plane unreachable (%s); retrying", exc)
            return
        except ControlPlaneError as exc:
            self._refused("register", exc)
            return
        self.agent_id = reply.agent_id
        self._failures = 0
        self.interval = reply.heartbeat_interval_s
        self.logs.batch_lines = max(1, min(reply.log_batch_max_lines, 5_000))
        self.fence_after_s = reply.fence_after_s
        if self.config.dead_man_switch_s is None:
            self.deadman.timeout_s = reply.dead_man_switch_s
        self.deadman.contact()
        self._setup_cloudwatch()
        if self.credentials is not None and reply.trial_role_arn:
            if ROLE_ARN.match(reply.trial_role_arn):
                self.credentials.adopt(reply.trial_role_arn)
            else:
                log.warning("ignoring trial_role_arn %r: not a role ARN", reply.trial_role_arn)
        log.info("registered as %s with %d GPU(s)", self.agent_id, len(self.gpus))

    def _recover_metrics(self) -> None:
        """Once, after the first registration: metrics files an earlier agent process left
        unsent are shipped from their start (the control plane drops what it already has)."""
        if self._metrics_recovered:
            return
        self._metrics_recovered = True
        try:
            found = self.trial_metrics.recover(self.config.work_dir / "trials")
        except OSError as exc:
            log.warning("cannot look for unsent trial metrics: %s", exc)
            return
        if found:
            log.info("shipping the metrics of %d earlier run(s) again", found)

    def _setup_cloudwatch(self) -> None:
        c, region = self.config, self.config.aws_region or self.identity.region
        tags = {"InstanceId": self.identity.cloud_id, "Pool": c.pool}
        if c.cloudwatch_log_group and self.logs.sink is None:
            self.logs.sink = CloudWatchLogs(
                c.cloudwatch_log_group,
                self.identity.cloud_id,
                region,
                stream_prefix=c.cloudwatch_log_stream,
            )
        if c.cloudwatch_metrics_namespace and self._cloudwatch is None:
            self._cloudwatch = CloudWatchMetrics(
                c.cloudwatch_metrics_namespace, tags, c.cloudwatch_metrics_interval_s, region
            )

    def _refused(self, what: str, exc: ControlPlaneError) -> None:
        """404/403: not ours (or identity refused); 409: our record is shutting down, gone or
        lost (the stale-instance fence: nothing this instance sends is taken any more); 422:
        short of GPUs. None of these improves by retrying: stop trials and exit."""
        log.error("%s refused by the control plane: %s", what, exc)
        self.agent_id = None
        for run in self.trials.values():
            run.stop(AgentTrialState.STOPPED, self.config.stop_grace_s, self.clock.monotonic())
        if exc.status == 409:  # the control plane says this instance is being shut down
            self.deadman.fire("the control plane says this instance is shutting down")
        self._finish(EXIT_REFUSED, None)

    # --- heartbeat and orders ------------------------------------------------------------
    def _heartbeat(self, now: float) -> None:
        assert self.agent_id is not None
        statuses = {tid: run.status() for tid, run in self.trials.items() if tid not in self._ended}
        notice = self.watcher.notice
        metrics = self._metrics()
        points, taken = self.trial_metrics.batch(METRIC_POINTS_PER_HEARTBEAT)
        request = HeartbeatRequest(
            trials=list(statuses.values()),
            gpu_metrics=metrics,
            metrics=points,
            draining=self.leaving or self.drain_notice,  # our own wish, not an echo
            interruption_notice=notice is not None and notice.action == "preempt",
        )
        try:
            # Silence is timed from the request, not its reply: the control plane times it
            # from when the heartbeat arrived, which is never earlier, so the fence below
            # always fires before the control plane declares this agent lost.
            sent = self.clock.monotonic()
            reply = self.client.heartbeat(self.agent_id, request)
        except Unreachable as exc:
            self._failures += 1
            delay = max(self.interval, self.client.backoff(self._failures))
            self._next_heartbeat = now + delay
            log.warning(
                "heartbeat failed (%s); trials keep running; silent for %.0f s",
                exc,
                self.deadman.silent_for(),
            )
            return
        except ControlPlaneError as exc:
            if exc.status in (403, 404, 409, 410):
                self._refused("heartbeat", exc)
            else:
                log.error("heartbeat rejected: %s", exc)
                self._next_heartbeat = now + self.interval
            return
        self._failures = 0
        self._next_heartbeat = now + self.interval
        self.deadman.contact(sent)
        self.trial_metrics.acked(taken, set(reply.metrics_retry))
        for tid, sent in statuses.items():
            self._acked(self.trials[tid], sent)
        if self._cloudwatch is not None:
            self._cloudwatch.maybe_put(now, metrics)
        if reply.drain != self.draining:
            log.info(
                "the control plane %s", "drains this agent" if reply.drain else "lifts the drain"
            )
            self.draining = reply.drain
        for tid in reply.stop:
            if tid in self.trials:
                log.info("stopping trial %s on request", tid)
                self.trials[tid].stop(AgentTrialState.STOPPED, self.config.stop_grace_s, now)
        for assignment in reply.start:
            self._start(assignment)

    def _acked(self, run: TrialRun, sent: TrialStatus) -> None:
        run.acked = sent
        # A finished run is forgotten once reported, so a re-run of the same trial id
        # (restart after a user error) can be started here again.
        if run.terminal and run.status() == sent and self.trials.get(run.trial_id) is run:
            del self.trials[run.trial_id]
            run.cleanup()
            if self.credentials is not None:
                self.credentials.revoke(run.trial_id)  # its token dies with the run

    def _send_status(self, run: TrialRun) -> None:
        if run.trial_id in self._ended:
            self._forget_ended(run)
            return
        if run.terminal and run.log_end_seq is None:
            # Its output is read (the process executor drains the pipes before it reports
            # the exit): say where it ends, and ship it BEFORE the terminal status, so a
            # reader that stops at the end of the trial (corral command run) has every line.
            run.log_end_seq = self.logs.last_seq(run.trial_id)
        if self.agent_id is None:
            return
        if run.terminal and not self.logs.flush_trial(run.trial_id, self._send_logs):
            log.warning("last output of %s not delivered yet; it follows", run.trial_id)
        if run.terminal and self.trial_metrics.unsent(run.trial_id):
            # Its last metric points go first too (a heartbeat stores them before the
            # statuses it carries), so a finished trial already shows its final metrics.
            self._heartbeat(self.clock.monotonic())
        status = run.status()
        log.info("trial %s: %s (exit code %s)", run.trial_id, status.state, status.exit_code)
        try:
            self.client.trial_status(self.agent_id, status)
        except ControlPlaneError as exc:
            if self._fenced("status of " + run.trial_id, exc):
                return
            if exc.status == 410:
                self._trial_ended(run, status, exc)
                return
            log.warning(
                "status of %s not delivered (%s); the heartbeat will carry it", run.trial_id, exc
            )
            return
        except Unreachable as exc:
            log.warning(
                "status of %s not delivered (%s); the heartbeat will carry it", run.trial_id, exc
            )
            return
        self._acked(run, status)

    def _fenced(self, what: str, exc: ControlPlaneError) -> bool:
        """A 409 to any call: this instance is fenced (shutting down, gone or declared lost),
        so nothing it sends is taken. Stop at once rather than wait for the next heartbeat's
        refusal; True if so."""
        if exc.status != 409:
            return False
        self._refused(what, exc)
        return True

    def _trial_ended(self, run: TrialRun, sent: TrialStatus, exc: ControlPlaneError) -> None:
        """410: the trial has ended on the control plane (completed by another rank, killed,
        or this very report was applied and its reply lost). Nothing more about it is taken:
        stop it if it still runs, and do not send this report again."""
        log.info("trial %s has ended on the control plane (%s): forgetting it", run.trial_id, exc)
        self._ended.add(run.trial_id)
        if not run.terminal and run.stop_as is None:
            run.stop(AgentTrialState.STOPPED, self.config.stop_grace_s, self.clock.monotonic())
        self._forget_ended(run)

    def _forget_ended(self, run: TrialRun) -> None:
        """Forget a run of an ended trial once its process is gone (its logs and metrics
        are past their trial's end: dropped, not shipped)."""
        if run.terminal and self.trials.get(run.trial_id) is run:
            del self.trials[run.trial_id]
            self._ended.discard(run.trial_id)
            run.cleanup()

    def _send_logs(self, trial_id: str, batch: LogBatch) -> None:
        if self.agent_id is None:  # fenced during this flush: nothing will be taken
            raise PermanentLogError("the agent is no longer registered")
        try:
            self.client.logs(self.agent_id, trial_id, batch)
        except ControlPlaneError as exc:
            # 410: the trial ended and the lines go past its announced end; 409: this
            # instance is fenced (and stops). Neither is sent again.
            self._fenced("logs of " + trial_id, exc)
            raise PermanentLogError(str(exc)) from exc

    def _start(self, a: TrialAssignment) -> None:
        existing = self.trials.get(a.trial_id)
        if existing is not None:
            return  # already running here (a reply crossed our report): nothing to do
        if self.agent_id is None:
            return  # fenced by a refusal earlier in this reply's handling: start nothing
        if self.leaving or self.drain_notice or self._exit_when_done is not None:
            self._hand_back(a.trial_id, "not started: the agent is shutting down")
            return
        # Only node rank 0 of a trial reports metrics (the others get /dev/null).
        metrics_file = None
        if a.rendezvous is None or a.rendezvous.node_rank == 0:
            try:
                directory = metrics_dir(self.config.work_dir, a.trial_id)
                metrics_file = self.trial_metrics.start_run(a.trial_id, directory)
            except OSError as exc:  # the trial runs anyway; its metrics go nowhere
                log.warning("no metrics file for %s: %s", a.trial_id, exc)
        spec = launch_spec(a, self.config, self.agent_id, self.executor.in_container, metrics_file)
        if self.credentials is not None and self.credentials.ready:
            scope = TrialScope(a.trial_id, a.experiment_id, a.checkpoint.storage_uri)
            spec = replace(spec, credentials=self.credentials.grant(scope))
        run = TrialRun(a, spec, self.executor, lambda s, line: self.logs.add(a.trial_id, s, line))
        self.trials[a.trial_id] = run
        self.logs.start_run(a.trial_id)
        missing = sorted(set(a.gpus) - {g.index for g in self.gpus})
        if missing:
            run.fail(f"GPU indices {missing} do not exist on this agent")
        else:
            log.info("starting trial %s on GPUs %s with %s", a.trial_id, a.gpus, self.executor.name)
            run.start()
        self._send_status(run)

    def _hand_back(self, trial_id: str, why: str) -> None:
        """A trial this agent will not run (sent while it is on its way out, or left behind
        by its previous process): report it preempted so the control plane requeues it now
        instead of waiting for a start or an end that never comes. If the report is lost,
        the control plane finds the trial missing from the heartbeats and requeues it."""
        if self.agent_id is None:
            return  # fenced by an earlier refusal: nothing is taken any more
        log.info("handing trial %s back: %s", trial_id, why)
        status = TrialStatus(trial_id=trial_id, state=AgentTrialState.PREEMPTED, message=why)
        try:
            self.client.trial_status(self.agent_id, status)
        except ControlPlaneError as exc:
            if not self._fenced("hand-back of " + trial_id, exc):
                log.warning("hand-back of %s not delivered (%s)", trial_id, exc)
        except Unreachable as exc:
            log.warning("hand-back of %s not delivered (%s)", trial_id, exc)

    def _fence(self, now: float) -> None:
        """Out of contact past ``fence_after_s``: the control plane has declared this agent
        lost, or will before these trials could end, and runs them elsewhere. Stop them here
        (they checkpoint) so no trial ever runs in two places; they are reported preempted
        once contact is back. Shorter outages touch nothing."""
        if self.fence_after_s is None or self.deadman.silent_for() < self.fence_after_s:
            return
        running = [r for r in self.trials.values() if not r.terminal and r.stop_as is None]
        for run in running:
            log.warning(
                "no contact with the control plane for %.0f s: stopping trial %s (it runs "
                "elsewhere next)",
                self.deadman.silent_for(),
                run.trial_id,
            )
            run.stop(AgentTrialState.PREEMPTED, self.config.stop_grace_s, now)

    # --- interruptions and exit ----------------------------------------------------------
    def _interrupt(self, notice: Notice, notify: bool) -> None:
        self.drain_notice = True
        if notice.action == "preempt":
            self.leaving = True
            grace = grace_for(notice, self.config.interruption_margin_s)
            now = self.clock.monotonic()
            for run in self.trials.values():
                run.stop(AgentTrialState.PREEMPTED, grace, now)
        self._next_heartbeat = self.clock.monotonic()  # tell the control plane at once
        if notify:
            log.warning("interruption: trials checkpoint and stop; agent drains")

    def _finish(self, code: int, deadline: float | None) -> None:
        self._exit_when_done = code
        self._exit_deadline = deadline

    def _maybe_exit(self, now: float) -> None:
        if self._exit_when_done is None:
            return
        running = [r for r in self.trials.values() if not r.terminal]
        # Registered: wait until every end was reported and every log line delivered.
        unreported = self.agent_id is not None and (
            bool(self.trials) or self.logs.backlog() > 0 or self.trial_metrics.backlog() > 0
        )
        late = self._exit_deadline is not None and now >= self._exit_deadline
        if late or not (running or unreported):
            self.exit_code = self._exit_when_done
