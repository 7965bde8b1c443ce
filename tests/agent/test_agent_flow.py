"""The agent against a fake control plane (and fake metadata) on loopback, stepped with a
fake clock: registration, heartbeats, trials run by the process executor, checkpoints,
interruptions, outages and the dead man's switch."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from agent_runtime.agent import EXIT_DEADMAN, EXIT_OK, EXIT_REFUSED
from corral.protocol.agent import TrialAssignment
from tests.agent.conftest import (
    FakeControlPlane,
    FakeMetadata,
    assignment,
    ec2_values,
    trial_script,
)

PRINT_ENV = """
import json, os, sys
keys = ["CORRAL_TRIAL_ID", "CORRAL_EXPERIMENT_ID", "CORRAL_HPARAMS", "CUDA_VISIBLE_DEVICES",
        "CORRAL_LATEST_CHECKPOINT", "CORRAL_CHECKPOINT_DIR", "WORLD_SIZE", "RANK"]
print(json.dumps({k: os.environ.get(k) for k in keys}))
print("to stderr", file=sys.stderr)
print("leaked token:", os.environ.get("CORRAL_AGENT_DEV_TOKEN"))
sys.exit(3)
"""

# Traps SIGTERM: writes a checkpoint, declares it in $CORRAL_CHECKPOINT_DIR/latest, exits 0.
CHECKPOINTING = """
import os, signal, sys, time
ckpt_dir = os.environ["CORRAL_CHECKPOINT_DIR"]
def on_term(signum, frame):
    path = os.path.join(ckpt_dir, "step-42")
    with open(path, "w") as f:
        f.write("weights")
    with open(os.path.join(ckpt_dir, "latest"), "w") as f:
        f.write(path + "\\n")
    print("checkpointed", path)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", os.environ.get("CORRAL_LATEST_CHECKPOINT"))
while True:
    time.sleep(0.01)
"""


def _states(plane: FakeControlPlane, trial_id: str) -> list[str]:
    return [s["state"] for s in plane.statuses(trial_id)]


def test_registers_with_ec2_identity_and_heartbeats(make_agent, plane, metadata: FakeMetadata):
    metadata.values.update(ec2_values())
    h = make_agent(cloud="ec2", ec2_metadata_url=metadata.url)
    h.step_until(lambda: len(plane.posts("/heartbeat")) >= 2, advance=5.0)

    (register,) = plane.posts("/agents/register")
    body = register.body
    assert body["cloud_id"] == "i-0abc"
    assert body["identity"] == {
        "kind": "ec2",
        "document": ec2_values()["/latest/dynamic/instance-identity/document"],
        "signature": "PKCS7SIGNATURE",
    }
    assert (body["instance_type"], body["zone"], body["capacity_type"]) == (
        "g5.12xlarge",
        "us-east-1b",
        "spot",
    )
    assert body["private_ip"] == "10.0.0.7"
    assert [g["index"] for g in body["gpus"]] == [0, 1]
    assert register.headers["Authorization"] == "Bearer dev-secret"
    # IMDSv2: a token was fetched and every read carried it.
    assert any(r.method == "PUT" for r in metadata.seen)
    hb = plane.posts("/heartbeat")[0]
    assert hb.path == "/agents/rec-1/heartbeat"
    assert [m["index"] for m in hb.body["gpu_metrics"]] == [0, 1]
    assert hb.body["draining"] is False


def test_assignment_runs_and_reports_exit_code_and_logs(make_agent, plane, tmp_path, monkeypatch):
    monkeypatch.setenv("CORRAL_AGENT_DEV_TOKEN", "must-not-leak")
    plane.heartbeat_replies.append(
        {"start": [assignment("t-1", trial_script(tmp_path, PRINT_ENV))]}
    )
    h = make_agent()
    h.step_until(lambda: "exited" in _states(plane, "t-1") and len(plane.log_lines("t-1")) >= 3)

    states = _states(plane, "t-1")
    assert states[0] == "starting"
    final = next(s for s in plane.statuses("t-1") if s["state"] == "exited")
    assert final["exit_code"] == 3
    lines = plane.log_lines("t-1")
    # stdout and stderr are read by separate threads: their relative order is not fixed.
    env = json.loads(next(x for x in lines if x.startswith("{")))
    assert env["CORRAL_TRIAL_ID"] == "t-1"
    assert env["CORRAL_EXPERIMENT_ID"] == "exp-1"
    assert json.loads(env["CORRAL_HPARAMS"]) == {"layers": 4, "lr": 0.1}
    assert env["CUDA_VISIBLE_DEVICES"] == "1"  # host index: no container renumbering
    assert env["CORRAL_LATEST_CHECKPOINT"] is None  # a fresh start
    assert env["WORLD_SIZE"] == "1" and env["RANK"] == "0"
    assert "to stderr" in lines
    assert "leaked token: None" in lines
    streams = {x["line"]: x["stream"] for r in plane.posts("/logs") for x in r.body["lines"]}
    assert streams["to stderr"] == "stderr"
    # Once reported, the finished run is forgotten: later heartbeats no longer carry it.
    h.step_until(lambda: not h.agent.trials, advance=5.0)
    n = len(plane.posts("/heartbeat"))
    h.step_until(lambda: len(plane.posts("/heartbeat")) > n, advance=5.0)
    assert plane.posts("/heartbeat")[-1].body["trials"] == []


def test_resume_from_checkpoint_and_spot_notice_preempts_in_the_window(
    make_agent, plane, metadata: FakeMetadata, tmp_path: Path
):
    metadata.values.update(ec2_values())
    start = assignment(
        "t-2",
        trial_script(tmp_path, CHECKPOINTING),
        checkpoint={"storage_uri": f"file://{tmp_path}/ckpts/t-2", "latest": "step-7"},
    )
    plane.heartbeat_replies.append({"start": [start]})
    h = make_agent(cloud="ec2", ec2_metadata_url=metadata.url)
    h.step_until(lambda: any(x.startswith("ready") for x in plane.log_lines("t-2")))
    assert "ready step-7" in plane.log_lines("t-2")  # CORRAL_LATEST_CHECKPOINT reached it

    noticed_at = h.clock.time()
    when = datetime.fromtimestamp(noticed_at + 120, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    metadata.values["/latest/meta-data/spot/instance-action"] = json.dumps(
        {"action": "terminate", "time": when}
    )
    h.step_until(lambda: "preempted" in _states(plane, "t-2"), advance=0.5)

    assert h.clock.time() - noticed_at < 120 - h.agent.config.interruption_margin_s
    final = next(s for s in plane.statuses("t-2") if s["state"] == "preempted")
    assert final["latest_checkpoint"] == f"{tmp_path}/ckpts/t-2/step-42"
    assert final["exit_code"] == 0  # it checkpointed and exited on SIGTERM
    assert (tmp_path / "ckpts/t-2/step-42").read_text() == "weights"
    hb = plane.posts("/heartbeat")[-1].body
    assert hb["interruption_notice"] is True and hb["draining"] is True
    # Draining: new work is refused.
    plane.heartbeat_replies.append({"start": [assignment("t-3", ["true"])]})
    h.step_until(lambda: not plane.heartbeat_replies, advance=5.0)
    assert "t-3" not in h.agent.trials


def test_outage_keeps_trial_running_then_dead_mans_switch_fires(make_agent, plane, tmp_path):
    plane.heartbeat_replies.append(
        {"start": [assignment("t-4", trial_script(tmp_path, CHECKPOINTING))]}
    )
    h = make_agent(dead_man_switch_s=300)
    h.step_until(lambda: "running" in _states(plane, "t-4"))
    plane.down = True
    # A short outage (four minutes of fake time): nothing touches the trial.
    h.step_until(lambda: h.agent.deadman.silent_for() >= 240, advance=10.0)
    assert h.agent.trials["t-4"].state.value == "running"
    assert h.shutdowns == []
    plane.down = False  # back: the timer resets, the trial is reported still running
    h.step_until(lambda: h.agent.deadman.silent_for() < 10, advance=5.0)
    plane.down = True
    h.step_until(lambda: h.agent.exit_code is not None, advance=10.0)
    assert h.agent.exit_code == EXIT_DEADMAN
    assert h.shutdowns == [["fake-shutdown"]]


def test_stop_order_and_sigterm_to_the_agent(make_agent, plane, tmp_path):
    script = trial_script(tmp_path, CHECKPOINTING)
    plane.heartbeat_replies.append(
        {"start": [assignment("t-5", script), assignment("t-6", script, gpus=[0])]}
    )
    h = make_agent()
    h.step_until(lambda: {"running"} <= set(_states(plane, "t-5")) & set(_states(plane, "t-6")))
    plane.heartbeat_replies.append({"stop": ["t-5"]})
    h.step_until(lambda: "stopped" in _states(plane, "t-5"), advance=5.0)
    assert "t-6" in h.agent.trials
    h.agent.request_stop()
    h.step_until(lambda: h.agent.exit_code is not None, advance=0.5)
    assert h.agent.exit_code == EXIT_OK
    assert "preempted" in _states(plane, "t-6")


def test_register_refused_exits_without_retrying(make_agent, plane):
    plane.register_status = 403
    h = make_agent()
    h.step_until(lambda: h.agent.exit_code is not None)
    assert h.agent.exit_code == EXIT_REFUSED
    assert len(plane.posts("/agents/register")) == 1
    assert h.shutdowns == []


def test_register_409_shuts_the_instance_down(make_agent, plane):
    plane.register_status = 409
    h = make_agent()
    h.step_until(lambda: h.agent.exit_code is not None)
    assert h.agent.exit_code == EXIT_REFUSED
    assert h.shutdowns == [["fake-shutdown"]]


def test_register_retries_with_backoff_while_the_plane_is_down(make_agent, plane):
    plane.down = True
    h = make_agent(agent_reconnect_attempts=2)
    h.agent.run_once()
    assert len(plane.posts("/agents/register")) == 3  # one try plus two reconnect attempts
    assert h.agent.agent_id is None
    plane.down = False
    h.step_until(lambda: h.agent.agent_id == "rec-1", advance=30.0)


def test_a_drain_taken_back_by_the_control_plane_is_lifted(make_agent, plane, tmp_path):
    """The heartbeat reply is the truth: an agent told to drain, then taken back for pending
    demand (the reply says drain no more and carries work), starts that work."""
    entry = trial_script(tmp_path, "print('hello from t-back')\n")
    plane.heartbeat_replies = [
        {"drain": True},
        {"drain": False, "start": [assignment("t-back", entry)]},
    ]
    h = make_agent()
    h.step_until(lambda: len(plane.posts("/heartbeat")) >= 2, advance=5.0)
    h.step_until(lambda: "exited" in _states(plane, "t-back"), advance=1.0)
    assert h.agent.draining is False
    assert plane.log_lines("t-back") == ["hello from t-back"]
    later = plane.posts("/heartbeat")[-1].body
    assert later["draining"] is False


def test_work_refused_while_leaving_is_handed_back(make_agent, plane, tmp_path):
    """An agent on its way out (SIGTERM) that is sent work reports it preempted at once,
    so the control plane requeues it instead of waiting for a start that never comes."""
    entry = trial_script(tmp_path, "print('never')\n")
    h = make_agent()
    h.step_until(lambda: len(plane.posts("/heartbeat")) >= 1, advance=5.0)
    h.agent._exit_when_done = 0  # leaving (as after SIGTERM), not yet gone
    h.agent._start(TrialAssignment.model_validate(assignment("t-late", entry)))
    assert _states(plane, "t-late") == ["preempted"]
    assert "t-late" not in h.agent.trials


def test_a_restarted_agent_stops_what_its_previous_process_left_and_hands_it_back(
    make_agent, plane, tmp_path
):
    """systemd restarts the agent: the old process's trial keeps running, unknown to the
    new one. The new agent checkpoints and stops it, then reports it preempted so the
    control plane requeues it (rather than a trial RUNNING that nobody reports)."""
    entry = trial_script(tmp_path, CHECKPOINTING)
    plane.heartbeat_replies = [{"start": [assignment("t-old", entry)]}]
    first = make_agent()
    first.step_until(lambda: "running" in _states(plane, "t-old"), advance=1.0)
    first.step_until(lambda: plane.log_lines("t-old"), advance=1.0)
    (run,) = first.agent.trials.values()

    second = make_agent()  # same work dir, a new process
    second.step_until(lambda: "preempted" in _states(plane, "t-old"), advance=1.0)
    deadline = time.monotonic() + 5
    while run._handle is not None and run._handle.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run._handle is not None and run._handle.poll() == 0  # SIGTERM: it checkpointed
    assert (tmp_path / "work" / "trials" / "t-old" / "checkpoints" / "step-42").exists()
    assert not (tmp_path / "work" / "trials" / "t-old" / "pid").exists()
    assert "t-old" not in second.agent.trials


def test_a_restart_never_signals_a_process_that_reused_a_recorded_pid(make_agent, plane):
    """The pid file of a long-gone trial now names another process (here: this one)."""
    h = make_agent()
    pid_file = Path(h.agent.config.work_dir) / "trials" / "t-gone" / "pid"
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text(str(os.getpid()))
    h.step_until(lambda: len(plane.posts("/heartbeat")) >= 1, advance=5.0)
    assert _states(plane, "t-gone") == []
    assert not pid_file.exists()


def test_a_process_trial_says_its_bind_mounts_are_not_applied(make_agent, plane, tmp_path):
    entry = trial_script(tmp_path, "print('ran')\n")
    mount = {"host_path": "/mnt/disks/second", "container_path": "/second", "read_only": True}
    plane.heartbeat_replies = [{"start": [assignment("t-bm", entry, bind_mounts=[mount])]}]
    h = make_agent()
    h.step_until(lambda: "exited" in _states(plane, "t-bm"), advance=1.0)
    lines = plane.log_lines("t-bm")
    assert lines[-1] == "ran"
    assert "bind mount /mnt/disks/second -> /second not applied" in lines[0]


def test_out_of_contact_past_the_fence_the_agent_stops_its_trials(make_agent, plane, tmp_path):
    """The control plane declares a silent agent lost and runs its trials elsewhere: an
    agent cut off (a partition, not only a dead control plane) must stop them first."""
    plane.register_reply["fence_after_s"] = 50.0
    plane.heartbeat_replies.append(
        {"start": [assignment("t-f", trial_script(tmp_path, CHECKPOINTING))]}
    )
    h = make_agent()
    h.step_until(lambda: "running" in _states(plane, "t-f"))
    plane.down = True
    h.step_until(lambda: h.agent.deadman.silent_for() >= 40, advance=5.0)
    assert h.agent.trials["t-f"].stop_as is None  # a short outage touches nothing
    h.step_until(lambda: h.agent.trials["t-f"].terminal, advance=5.0)
    assert h.agent.trials["t-f"].state.value == "preempted"
    plane.down = False  # contact again: the stop is reported, the checkpoint with it
    h.step_until(lambda: "preempted" in _states(plane, "t-f"), advance=5.0)
    assert h.shutdowns == []
