"""``DevStack``: Corral on one machine, driven as AWS drives it.

One process holds the moto server (a child), the tables/queues/rules from the template, the
real handlers behind an HTTP shim (and API Gateway's IAM authorizer in front of them), the
queue pollers and timers (threads) and the instance emulator, whose machines boot from their
user data in process sessions of their own, running the agent installed from this
checkout's wheel (``agent_venv``). The stack makes itself a child subreaper, so an agent the
boot's shell left behind, or a trial orphaned by a dying agent, is re-parented to it and
still stopped on shutdown: ``stop`` leaves no process behind.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.domain.config import LoadedConfig, cluster_config_from_mapping, parse_yaml
from corral.local import agent_venv, moto_server, users
from corral.local.credentials import CredentialStore
from corral.local.faults import install_capacity_faults, install_handler_capacity_faults
from corral.local.http_shim import HttpShim
from corral.local.iam_authorizer import IamAuthorizer
from corral.local.instance_emulator import (
    EmulatorSettings,
    InstanceEmulator,
    forget_previous_machines,
)
from corral.local.lambda_host import FunctionHost, FunctionOutput
from corral.local.pollers import QueuePoller
from corral.local.proctree import descendants, stop_tree
from corral.local.resources import LocalResources, create_from_template
from corral.local.state import StateDir
from corral.local.timers import Timer

log = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36
# Where trials find the examples (see examples/grid.yaml): the directory the stack runs in.
WORKSPACE_ENV = "CORRAL_WORKSPACE"


def default_template() -> Path:
    """``infra/template.yaml`` of this checkout (editable install), else of the cwd."""
    here = Path(__file__).resolve().parents[3] / "infra" / "template.yaml"
    return here if here.exists() else Path("infra/template.yaml").absolute()


def read_cluster_config(text: str) -> LoadedConfig:
    """The stack's cluster config from its YAML text, or a ConfigError with every problem;
    ``corral dev up`` checks a file with this before it starts anything. The text is never
    taken for a path (``load_cluster_config`` reads a one-line ``x.yaml`` as a file name)."""
    return cluster_config_from_mapping(parse_yaml(text))


@dataclass
class StackOptions:
    cluster_config: Path
    state: StateDir = field(default_factory=StateDir.default)
    template: Path = field(default_factory=default_template)
    api_port: int = 0
    timer_scale: float = 1.0  # < 1 runs the template's timers faster (demos, tests)
    boot_delay_s: float = 2.0
    agent_settings: dict[str, Any] = field(default_factory=dict)
    verbose: bool = False


# The local deployment's agent settings (CORRAL_AGENT_SETTINGS, which scale_up writes into
# every launch's user data, as a real deployment's would). The agent's timers, shortened for
# a laptop: notices are polled every second, a stopped trial gets a few seconds to
# checkpoint, and a lost stack is noticed within a minute. Trials are processes (no Docker),
# and the dead man's switch "shuts the machine down": here, the agent itself (its parent is
# the shell the switch runs), never the developer's computer.
DEV_AGENT_SETTINGS: dict[str, Any] = {
    "executor": "process",
    "shutdown_command": ["sh", "-c", "kill -TERM $PPID"],
    "interruption_poll_s": 1.0,
    "interruption_margin_s": 2.0,
    "stop_grace_s": 5.0,
    "tick_s": 0.5,
    "log_flush_interval_s": 1.0,
    "agent_reconnect_attempts": 3,
    "agent_reconnect_backoff": 1.0,
    "dead_man_switch_s": 60.0,
    # GPU metrics reach moto's CloudWatch every 10 s rather than every minute.
    "cloudwatch_metrics_interval_s": 10.0,
}


_NOT_ON_A_MACHINE = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")


class _AgentInstall:
    """The agent venv (``agent_venv``) built in a thread, joined before the first boot."""

    def __init__(self, state: StateDir) -> None:
        self._state = state
        self._home: Path | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._build, name="agent-venv", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _build(self) -> None:
        try:
            root = agent_venv.project_root()
            if root is None:
                log.info("no checkout to build the agent from: machines run this interpreter's")
                self._home = agent_venv.developer_agent(self._state.root / "image" / "agent")
            else:
                self._home = agent_venv.agent_install(root)
        except BaseException as error:  # re-raised in the starting thread
            self._error = error

    def result(self) -> Path:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._home is not None
        return self._home


AGENT_ROLE = "corral-local-agent"
_EC2_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "ec2.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}


def _create_agent_role(session: Any) -> str:
    """The agent role and its instance profile in moto (the template's AgentRole and
    AgentInstanceProfile); returns the profile's ARN."""
    iam = session.client("iam")
    iam.create_role(RoleName=AGENT_ROLE, AssumeRolePolicyDocument=json.dumps(_EC2_TRUST))
    profile = iam.create_instance_profile(InstanceProfileName=AGENT_ROLE)["InstanceProfile"]
    iam.add_role_to_instance_profile(InstanceProfileName=AGENT_ROLE, RoleName=AGENT_ROLE)
    return str(profile["Arn"])


def _become_subreaper() -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            log.debug("prctl(PR_SET_CHILD_SUBREAPER) unavailable")


class DevStack:
    def __init__(self, options: StackOptions) -> None:
        self.options = options
        self.state = options.state
        self.stop_event = threading.Event()
        self.moto: moto_server.MotoServer | None = None
        self.http: HttpShim | None = None
        self.emulator: InstanceEmulator | None = None
        self.pollers: list[QueuePoller] = []
        self.timers: list[Timer] = []
        self.resources: LocalResources | None = None
        self.user_token = ""
        self.api_url = ""
        self.aws_endpoint = ""
        self._stopped = False
        self._saved_stdout: Any = None
        self._function_log: Any = None
        # The machines' environment: taken before the stack adds moto's endpoint, fake
        # credentials and its secrets, and without the developer's Python settings (the
        # agent is the one installed in its own venv, as on the image).
        self._agent_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AWS_", "CORRAL_")) and k not in _NOT_ON_A_MACHINE
        }
        self._agent_env[WORKSPACE_ENV] = str(Path.cwd())

    # ---- start ------------------------------------------------------------------------
    def start(self) -> None:
        running = self.state.running_pid()
        if running is not None and running != os.getpid():
            raise RuntimeError(f"a local stack already runs (pid {running}); corral dev down")
        config_text = self.options.cluster_config.read_text()
        loaded = read_cluster_config(config_text)  # a bad config fails here, before moto
        self.state.prepare()
        self.state.clear_runtime_files()
        forget_previous_machines(self.state)
        if self._saved_stdout is not None:
            sys.stdout = self._saved_stdout
            self._function_log.close()
        self.state.write(self.state.pid_file, f"{os.getpid()}\n")
        _become_subreaper()
        try:
            self._start(config_text, loaded.config)
        except BaseException:
            self.stop()
            raise

    def _start(self, config_text: str, config: Any) -> None:
        import boto3  # type: ignore[import-untyped]

        # The agent install is built (or found in its cache) while the rest starts.
        install = _AgentInstall(self.state)
        install.start()

        self.moto = moto_server.MotoServer(self.state.logs / "moto.log")
        self.moto.start(images=moto_server.pool_images(config))
        assert self.moto.pid is not None
        self.state.add_child(self.moto.pid)
        self.aws_endpoint = self.moto.endpoint
        region = next(
            (
                p.provider.region
                for p in config.resource_pools
                if getattr(p.provider, "region", None)
            ),
            moto_server.DEFAULT_REGION,
        )
        moto_server.apply_aws_env(self.aws_endpoint, region)
        boto3.setup_default_session()
        session = boto3.DEFAULT_SESSION
        assert session is not None
        # Clients made from here on inherit the hook: the stack's own, and the handlers'
        # (their adapters make clients from a session of their own).
        install_capacity_faults(self.state, session.events)
        install_handler_capacity_faults(self.state)
        self.resources = create_from_template(self.options.template, session)
        for warning in self.resources.warnings:
            log.warning("template: %s", warning)
        if self.resources.http is None:
            raise RuntimeError(f"{self.options.template}: no function with an HttpApi event")
        # The default user's token is new on every start; users added with `corral dev user
        # add` keep theirs (local/users.py).
        self.user_token = users.start_default_user(self.state)
        credentials = CredentialStore(moto_server.FAKE_ACCOUNT)
        profile_arn = _create_agent_role(session)
        self._set_function_env(config_text, config, profile_arn)

        # Function output (JSON logs, EMF metrics) goes to logs/functions.log, not the terminal.
        self._function_log = (self.state.logs / "functions.log").open("a", buffering=1)
        self._saved_stdout = sys.stdout
        sys.stdout = FunctionOutput(sys.stdout, self._function_log)
        host = FunctionHost(region)
        http_fn = self.resources.http
        authorizer = IamAuthorizer(credentials)
        self.http = HttpShim(
            authorizer.wrap(lambda event: host.invoke(http_fn, event)),
            self.options.api_port,
            route_key=self.resources.http_route,
        )
        self.api_url = self.http.url
        # Written into each launch's user data: where the agents reach the API.
        os.environ["CORRAL_API_URL"] = self.api_url
        self.http.start()
        sqs = session.client("sqs")
        for source in self.resources.queues:
            poller = QueuePoller(source, sqs, host, region, self.stop_event)
            self.pollers.append(poller)
            poller.start()
        for timer_source in self.resources.timers:
            timer = Timer(
                timer_source,
                host,
                region,
                moto_server.FAKE_ACCOUNT,
                self.stop_event,
                scale=self.options.timer_scale,
            )
            self.timers.append(timer)
            timer.start()
        ownership = tuple(
            dict.fromkeys((p.ownership.key, p.ownership.value) for p in config.resource_pools)
        )
        settings = EmulatorSettings(
            ownership=ownership,
            agent_home=install.result(),
            credentials=credentials,
            boot_delay_s=self.options.boot_delay_s,
            agent_env=self._agent_env,
            aws_endpoint=self.aws_endpoint,
        )
        self.emulator = InstanceEmulator(self.state, session, settings, self.stop_event)
        self.emulator.start()
        # Last: other processes take these files to mean "ready".
        self.state.write(self.state.aws_endpoint_file, self.aws_endpoint + "\n")
        self.state.write(self.state.endpoint_file, self.api_url + "\n")

    def _set_function_env(self, config_text: str, config: Any, profile_arn: str) -> None:
        assert self.resources is not None
        env = self.resources.environment()
        env.update(
            {
                "CORRAL_CLUSTER_CONFIG": config_text,  # wins over the SSM parameter
                "CORRAL_API_AUTH": "token",
                # Read again on every change: users added while the stack runs count at once.
                "CORRAL_USERS_FILE": str(self.state.users_file),
                # The stack's default user administers it (kills anyone's work, resets
                # breakers), whatever the config's `admins` says; users added later do not.
                "CORRAL_ADMINS": users.DEFAULT_USER,
                # Agents sign with SigV4 as on AWS: the role EC2 names their sessions under.
                "CORRAL_AGENT_ROLE_NAME": AGENT_ROLE,
                "CORRAL_ACCOUNT_ID": moto_server.FAKE_ACCOUNT,
                "CORRAL_AGENT_INSTANCE_PROFILE_ARN": profile_arn,
                "CORRAL_AGENT_SETTINGS": json.dumps(
                    {**DEV_AGENT_SETTINGS, **self.options.agent_settings}
                ),
                "POWERTOOLS_LOG_LEVEL": "DEBUG" if self.options.verbose else "INFO",
            }
        )
        pairs = {(p.ownership.key, p.ownership.value) for p in config.resource_pools}
        # The template's tag pair guards IAM policies, which moto does not enforce: use the
        # example cluster's own pair instead of refusing it.
        for name in ("CORRAL_TAG_KEY", "CORRAL_TAG_VALUE"):
            env.pop(name, None)
            os.environ.pop(name, None)
        # Users come from the users file only, never from the caller's environment.
        for name in ("CORRAL_USER_TOKEN", "CORRAL_USER_NAME"):
            os.environ.pop(name, None)
        if len(pairs) == 1:
            ((key, value),) = pairs
            env.update({"CORRAL_TAG_KEY": key, "CORRAL_TAG_VALUE": value})
        os.environ.update(env)

    # ---- run and stop -----------------------------------------------------------------
    def banner(self) -> str:
        # The token is what a browser or curl needs (the CLI reads it from the state dir);
        # the dashboard takes it from the URL fragment, which never reaches a server log.
        return (
            f"Corral local stack is up.\n"
            f"  API:        {self.api_url}   (docs: {self.api_url}/docs)\n"
            f"  dashboard:  {self.api_url}/#token={self.user_token}\n"
            f"  token:      {self.user_token}   (user {users.DEFAULT_USER}, an admin; "
            f"Authorization: Bearer <token>; also in {self.state.token_file})\n"
            f"  users:      corral dev user add NAME   (prints a token; CORRAL_TOKEN=<it>)\n"
            f"  AWS (moto): {self.aws_endpoint}\n"
            f"  state:      {self.state.root}\n"
            f"  try:        corral experiment create examples/grid.yaml --follow"
        )

    def run_until_signalled(self) -> None:
        def on_signal(signum: int, _frame: Any) -> None:
            log.info("signal %d: stopping", signum)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGHUP, on_signal)
        try:
            while not self.stop_event.wait(0.5):
                pass
        finally:
            self.stop()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.stop_event.set()
        if self.http is not None:
            self.http.stop()
        if self.emulator is not None:
            self.emulator.stop_all()
        for thread in [p.thread for p in self.pollers] + [t.thread for t in self.timers]:
            thread.join(timeout=5)
        if self.moto is not None:
            self.moto.stop()
        # Anything still below us (trials orphaned by an agent) goes too.
        for pid in descendants(os.getpid()):
            stop_tree(pid, grace_s=1.0)
        for pid in self.state.children():
            stop_tree(pid, graceful=False)
        self.state.clear_runtime_files()
