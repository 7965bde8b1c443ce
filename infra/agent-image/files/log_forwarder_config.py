#!/usr/bin/env python3
"""Point the image's log forwarder at the pool's log group, then start it.

Installed as /usr/local/lib/corral/log_forwarder_config.py and run by
corral-log-forwarder.service (pulled in by corral-agent.service) once the bootstrap has
written /etc/corral/agent.yaml (JSON, which is YAML). Stdlib only, and runs on the image's
system python3 (3.9 or newer), not the agent's.

- AWS: the CloudWatch agent tails /var/log/corral/journal.log (corral-journal-export.service
  writes the journal there: the CloudWatch agent reads files, not the journal) into
  ``cloudwatch_log_group`` (default /corral/agents, the template's AgentLogGroupName), one
  stream per instance, ``<instance id>/journald``. Only logs: the agent itself puts the GPU
  metrics in ``cloudwatch_metrics_namespace`` (no second copy billed).
- GCP: the Ops Agent's journald receiver is baked (/etc/google-cloud-ops-agent/config.yaml);
  this only (re)starts it so it reads the merged config.

``--print`` writes the forwarder config to stdout and changes nothing (docs, tests).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

AGENT_CONFIG = Path("/etc/corral/agent.yaml")
IMAGE_CLOUD = Path("/etc/corral/image-cloud")  # "aws" or "gcp", written when the image is built
DEFAULT_LOG_GROUP = "/corral/agents"
JOURNAL_FILE = "/var/log/corral/journal.log"
CWAGENT_DIR = Path("/opt/aws/amazon-cloudwatch-agent")
CWAGENT_CONFIG = CWAGENT_DIR / "etc" / "corral.json"


def cloudwatch_config(agent: dict[str, Any]) -> dict[str, Any]:
    """The CloudWatch agent's config for this agent's settings."""
    group = agent.get("cloudwatch_log_group") or DEFAULT_LOG_GROUP
    config: dict[str, Any] = {
        "agent": {"logfile": str(CWAGENT_DIR / "logs" / "amazon-cloudwatch-agent.log")},
        "logs": {
            "logs_collected": {
                "files": {
                    "collect_list": [
                        {
                            "file_path": JOURNAL_FILE,
                            "log_group_name": group,
                            "log_stream_name": "{instance_id}/journald",
                            "timezone": "UTC",
                        }
                    ]
                }
            }
        },
    }
    if agent.get("aws_region"):
        config["agent"]["region"] = agent["aws_region"]
    return config


def commands(cloud: str) -> list[list[str]]:
    """What applying the config runs, in order."""
    if cloud == "aws":
        return [
            ["systemctl", "start", "corral-journal-export.service"],
            [
                str(CWAGENT_DIR / "bin" / "amazon-cloudwatch-agent-ctl"),
                "-a",
                "fetch-config",
                "-m",
                "ec2",
                "-s",
                "-c",
                f"file:{CWAGENT_CONFIG}",
            ],
        ]
    if cloud == "gcp":
        return [["systemctl", "restart", "google-cloud-ops-agent"]]
    raise ValueError(f"{IMAGE_CLOUD}: unknown cloud {cloud!r} (expected aws or gcp)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=AGENT_CONFIG)
    parser.add_argument("--cloud", help="aws or gcp (default: the image's, from image-cloud)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--print", action="store_true", help="print the config, change nothing")
    mode.add_argument("--apply", action="store_true", help="write the config, start the agent")
    args = parser.parse_args(argv)
    try:
        agent = json.loads(args.config.read_text(encoding="utf-8"))
        cloud = args.cloud or IMAGE_CLOUD.read_text(encoding="utf-8").strip()
        steps = commands(cloud)
    except (OSError, ValueError) as error:
        print(f"corral-log-forwarder: {error}", file=sys.stderr)
        return 1
    if not isinstance(agent, dict):
        print(f"corral-log-forwarder: {args.config}: not a mapping", file=sys.stderr)
        return 1
    text = json.dumps(cloudwatch_config(agent), indent=2) if cloud == "aws" else ""
    if args.print:
        if text:
            print(text)
        for step in steps:
            print("would run:", " ".join(step))
        return 0
    if text:
        CWAGENT_CONFIG.parent.mkdir(parents=True, exist_ok=True)
        CWAGENT_CONFIG.write_text(text + "\n", encoding="utf-8")
    for step in steps:
        subprocess.run(step, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
