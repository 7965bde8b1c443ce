"""The local stack's API on its own, for the HTTP fuzz (``test_fuzz_local_http.py``): a moto
server with the tables, queues and rules of ``infra/template.yaml``, the template's ``api``
function (its real handler, imported on first request as a cold start) in a ``FunctionHost``,
behind the stack's HTTP server (``HttpShim``), with the function environment and users the
stack gives it. The same pieces, in the same order, as ``DevStack._start`` (``make run``);
only the pollers, timers and instance emulator are left out (nothing consumes the queues).

    python -m tests.api.local_api STATE_DIR CLUSTER_CONFIG

prints one JSON line (``url``, ``token``: the stack's default user, an admin) once it
serves, then writes everything else (the functions' JSON logs) to ``STATE_DIR/logs``, and
stops when its stdin closes. A child process: the handler's caches, ``os.environ`` (moto's
endpoint, the function environment) and its stdout stay out of the test's process.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from corral.local import moto_server, users
from corral.local.http_shim import HttpShim
from corral.local.lambda_host import FunctionHost
from corral.local.resources import create_from_template
from corral.local.stack import DevStack, StackOptions, _create_agent_role, read_cluster_config
from corral.local.state import StateDir


def main(state_root: Path, config_path: Path) -> None:
    import boto3  # type: ignore[import-untyped]

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    stack = DevStack(StackOptions(cluster_config=config_path, state=StateDir(state_root)))
    config_text = config_path.read_text()
    config = read_cluster_config(config_text).config
    stack.state.prepare()
    moto = moto_server.MotoServer(stack.state.logs / "moto.log")
    moto.start()
    http: HttpShim | None = None
    try:
        region = moto_server.DEFAULT_REGION
        moto_server.apply_aws_env(moto.endpoint, region)
        boto3.setup_default_session()
        resources = create_from_template(stack.options.template, boto3.DEFAULT_SESSION)
        assert resources.http is not None, "the template has no HTTP API"
        stack.resources = resources
        token = users.start_default_user(stack.state)
        # The stack's agent role and instance profile, as `make run` creates them in moto.
        stack._set_function_env(config_text, config, _create_agent_role(boto3.DEFAULT_SESSION))
        host = FunctionHost(region)
        api = resources.http
        http = HttpShim(lambda event: host.invoke(api, event), route_key=resources.http_route)
        http.start()
        print(json.dumps({"url": http.url, "token": token}), flush=True)
        # From here on stdout (the functions' logs) goes to a file, never a full pipe.
        log = os.open(stack.state.logs / "functions.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(log, sys.stdout.fileno())
        sys.stdin.read()  # until the test closes our stdin (or goes away)
    finally:
        if http is not None:
            http.stop()
        moto.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
