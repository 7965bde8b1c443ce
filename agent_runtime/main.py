"""``corral-agent``: wire the pieces from the config and run the loop until told to stop.

Exit codes: 0 stopped on SIGTERM, 1 bad config or identity, 2 unhealthy (fewer GPUs than the
instance type promises: not registered), 3 refused by the control plane, 4 dead man's switch.
The systemd unit written by the bootstrap script does not restart on 2, 3 or 4.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_runtime.agent import EXIT_UNHEALTHY, Agent
from agent_runtime.client import Auth, BearerAuth, ControlPlaneClient, SigV4Auth
from agent_runtime.clock import Clock, EventSleeper, Sleeper, SystemClock
from agent_runtime.config import AgentConfig, load_config
from agent_runtime.credential_server import CredentialServer, CredentialSource
from agent_runtime.deadman import Runner
from agent_runtime.executors import Executor, make_executor
from agent_runtime.gpus import GpuDetectionError, Unhealthy, check_expected, detect_gpus
from agent_runtime.identity import InstanceIdentity, MetadataSource, metadata_source
from agent_runtime.metadata_guard import Runner as GuardRunner
from agent_runtime.metadata_guard import guard, guard_rules, run_command
from agent_runtime.startup import run_container_startup_script
from agent_runtime.trial_credentials import TrialRoleSource
from agent_runtime.trial_credentials_gce import gce_source

log = logging.getLogger("agent_runtime")

EXIT_CONFIG = 1


def make_auth(
    config: AgentConfig, identity: InstanceIdentity, source: MetadataSource, clock: Clock
) -> Auth:
    if config.auth == "aws":
        region = config.aws_region or identity.region
        if not region:
            raise ValueError("aws auth needs a region (aws_region or the identity document)")
        return SigV4Auth(region)
    if config.auth == "gce":
        return BearerAuth(lambda: source.identity_token(config.api_url), clock, refresh=True)
    token = config.dev_token.get_secret_value() if config.dev_token else ""
    return BearerAuth(lambda: token, clock)


def _proxies(config: AgentConfig) -> dict[str, str] | None:
    """requests' proxy map for the control plane, or None when ``no_proxy`` covers the API
    (an API inside the VPC). Without proxy settings requests reads the environment."""
    from requests.utils import should_bypass_proxies

    if config.no_proxy and should_bypass_proxies(config.api_url, no_proxy=config.no_proxy):
        return None
    out = {"http": config.http_proxy, "https": config.https_proxy}
    return {k: v for k, v in out.items() if v} or None


def trial_credentials(
    config: AgentConfig, identity: InstanceIdentity, executor: Executor, sts: Any = None
) -> CredentialServer | None:
    """The trial-credentials endpoint, listening on loopback and on the trials' bridge
    gateway: with ``trial_role_arn``, or on EC2, where the control plane names the role at
    registration (until it does, and if it never does, trials get no credentials)."""
    source: CredentialSource
    if config.resolved_cloud == "gce":
        try:
            source = gce_source(config)
        except Exception as exc:  # the metadata server did not answer: run, without
            log.warning("GCE trials get no credentials from the agent: %s", exc)
            return None
    elif config.trial_role_arn or config.resolved_cloud == "ec2":
        if sts is None:
            import boto3  # type: ignore[import-untyped,unused-ignore]  # instance role (IMDS)

            sts = boto3.client("sts", region_name=config.aws_region or identity.region or None)
        source = TrialRoleSource(config.trial_role_arn, sts)
    else:
        return None
    server = CredentialServer(source, port=config.trial_credentials_port)
    server.start()
    gateway_of = getattr(executor, "bridge_gateway", None)
    if gateway_of is not None:
        try:
            gateway = gateway_of()
        except Exception as exc:  # the engine refused: host-network trials still get theirs
            log.warning("no credentials for bridge-network trials: %s", exc)
            gateway = None
        if gateway:
            try:
                server.listen_on_bridge(gateway)
            except OSError as exc:
                log.warning("no credentials for bridge-network trials (%s): %s", gateway, exc)
    return server


def apply_metadata_guard(
    config: AgentConfig,
    executor: Executor,
    credentials: CredentialServer | None,
    runner: GuardRunner | None = None,
) -> list[list[str]]:
    """The firewall rules that keep trials from the instance's identity (metadata_guard)."""
    docker = executor.in_container
    rules = guard_rules(
        docker=docker,
        process_uid=None if docker else config.run_as_uid,
        bridge_gateway=(
            credentials.bridge_address
            if credentials and getattr(credentials.source, "dnat_ecs_address", False)
            else None
        ),
        credentials_port=credentials.port if credentials else None,
    )
    return guard(config, rules, runner or run_command)


def build_agent(
    config: AgentConfig,
    clock: Clock | None = None,
    sleeper: Sleeper | None = None,
    *,
    executor: Executor | None = None,
    auth: Auth | None = None,
    shutdown_runner: Runner | None = None,
    sts: Any = None,
    guard_runner: GuardRunner | None = None,
) -> Agent:
    """Detect identity and GPUs and assemble an Agent. When the GPUs are short, report the
    machine unhealthy to the control plane (never register it) and raise ``Unhealthy``."""
    clock = clock or SystemClock()
    sleeper = sleeper or EventSleeper()
    source = metadata_source(config, clock)
    identity = source.identity()
    problem: Unhealthy | None = None
    try:
        gpus = detect_gpus(config)
    except GpuDetectionError as exc:
        gpus = []
        if config.expected_gpus:  # GPUs were promised: not finding any is unhealthy
            problem = Unhealthy(f"unhealthy: GPU detection failed: {exc}; not registering")
        else:
            log.info("no GPUs detected (%s)", exc)
    if problem is None:
        try:
            check_expected(gpus, config.expected_gpus)
            # On the host, before the executor's Docker client reads the registry config the
            # script may write (a credential helper): agent_runtime/startup.py.
            run_container_startup_script(config)
        except Unhealthy as exc:
            problem = exc
    client = ControlPlaneClient(
        config.api_url,
        auth or make_auth(config, identity, source, clock),
        sleeper,
        timeout_s=config.request_timeout_s,
        attempts=config.agent_reconnect_attempts,
        backoff_s=config.agent_reconnect_backoff,
        max_backoff_s=config.max_backoff_s,
        proxies=_proxies(config),
    )
    executor = executor or make_executor(config)
    credentials = trial_credentials(config, identity, executor, sts)
    apply_metadata_guard(config, executor, credentials, guard_runner)
    agent = Agent(
        config,
        identity,
        gpus,
        client,
        executor,
        source,
        clock,
        sleeper,
        shutdown_runner=shutdown_runner,
        credentials=credentials,
    )
    if problem is not None:
        # Report it instead of registering as a short-handed agent: the control plane
        # terminates the instance now and counts it against the pool's breaker.
        agent.report_unhealthy(str(problem))
        raise problem
    return agent


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corral-agent", description=__doc__)
    parser.add_argument("--config", type=Path, help="YAML/JSON config (or CORRAL_AGENT_CONFIG)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = load_config(args.config)
        agent = build_agent(config)
    except Unhealthy as exc:
        log.critical("%s", exc)
        return EXIT_UNHEALTHY
    except Exception as exc:
        log.critical("cannot start the agent: %s", exc)
        return EXIT_CONFIG
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: agent.request_stop())
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
