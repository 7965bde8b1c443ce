"""infra/agent-image checked offline: ``packer validate`` on the template (Debian's packer
1.6 has both builders built in, so it needs no plugin download), shellcheck and ``bash -n``
on every script, the scripts' dry runs, the image's unit against the bootstrap's, and the
log forwarder's config. Where packer or shellcheck is missing those checks skip, unless
CORRAL_REQUIRE_IMAGE_TOOLS=1 makes them required (CI installs both with apt)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from corral.bootstrap import BootstrapSettings, render_bootstrap

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "infra" / "agent-image"
TEMPLATE = IMAGE / "corral-agent.pkr.hcl"
SCRIPTS = sorted([*IMAGE.glob("scripts/*.sh"), IMAGE / "deep-learning-image.sh"])
FILES = IMAGE / "files"
BAKED_AGENT = "/opt/corral-agent/bin/corral-agent"
OFFLINE_ENV = {
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
    "CHECKPOINT_DISABLE": "1",  # no version check call home
}


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CORRAL_REQUIRE_IMAGE_TOOLS") == "1":
            pytest.fail(f"{name} is required (CORRAL_REQUIRE_IMAGE_TOOLS=1) but not on PATH")
        pytest.skip(f"{name} not installed (apt-get install {name})")
    return path


def _run(cmd: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env={**os.environ, **OFFLINE_ENV, **env},
        timeout=120,
        check=False,
        cwd=ROOT,
    )


# ---- the Packer template ------------------------------------------------------------------
def test_packer_validates_the_template_offline() -> None:
    packer = _tool("packer")
    version = _run([packer, "version"]).stdout
    match = re.search(r"v(\d+)\.(\d+)", version)
    assert match, version
    if (int(match[1]), int(match[2])) < (1, 7):
        # Packer 1.6 does not know required_plugins (plugins.pkr.hcl): the template alone.
        target = str(TEMPLATE)
    else:
        target = str(IMAGE)
    done = _run([packer, "validate", "-var", "gcp_project_id=corral-validate", target])
    if "Missing plugins" in done.stdout + done.stderr:
        pytest.skip("Packer >= 1.7 without its plugins: run `packer init infra/agent-image`")
    assert done.returncode == 0, done.stdout + done.stderr
    fmt = _run([packer, "fmt", "-check", "-diff", str(IMAGE)])
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def _hcl() -> str:
    return TEMPLATE.read_text()


def test_every_variable_used_is_declared_and_every_uploaded_path_exists() -> None:
    text = _hcl()
    declared = set(re.findall(r'^variable "([a-z_0-9]+)"', text, re.M))
    used = set(re.findall(r"\bvar\.([a-z_0-9]+)", text))
    assert used <= declared, used - declared
    # Every local path the template names (a file provisioner's source, or an item of the
    # upload lists in locals) exists.
    uploads = re.findall(r'"\$\{path\.root\}/([^"]+)"', text)
    assert len(uploads) >= 7, uploads
    for source in uploads:
        assert (IMAGE / source).exists(), source
    # Every script the builds run is in the repository, under the path it is uploaded to.
    for script in re.findall(r"bash /tmp/corral-image/(\S+?)\"", text):
        assert (IMAGE / script).is_file(), script


def test_both_builds_cover_both_clouds_and_run_the_scripts_in_order() -> None:
    text = _hcl()
    builds = dict(
        re.findall(r'build \{\s*name\s*=\s*"([a-z-]+)"\s*sources\s*=\s*\[([^\]]*)\]', text)
    )
    assert set(builds) == {"agent", "deep-learning"}
    for sources in builds.values():
        assert "source.amazon-ebs." in sources and "source.googlecompute." in sources
        for ref in re.findall(r'"source\.([a-z-]+)\.([a-z0-9-]+)"', sources):
            assert f'source "{ref[0]}" "{ref[1]}"' in text, ref
    steps = re.findall(
        r"bash /tmp/corral-image/scripts/(\S+?)\.sh", text.split('name    = "deep')[0]
    )
    assert steps == [
        "install-base",
        "install-nvidia",
        "install-agent",
        "install-log-forwarder",
        "cleanup",
    ]
    assert "ubuntu-jammy-22.04" in text and "al2023-ami" in text and "ubuntu-2204-lts" in text


# ---- the scripts ----------------------------------------------------------------------------
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_parse(script: Path) -> None:
    done = _run(["bash", "-n", str(script)])
    assert done.returncode == 0, done.stderr


def test_scripts_are_shellcheck_clean(tmp_path: Path) -> None:
    shellcheck = _tool("shellcheck")
    bootstrap = tmp_path / "bootstrap.sh"
    bootstrap.write_text(render_bootstrap(_settings()))
    targets = [*map(str, SCRIPTS), str(ROOT / "infra" / "gcp" / "firewall.sh"), str(bootstrap)]
    done = _run([shellcheck, "-x", *targets])
    assert done.returncode == 0, done.stdout


def _dry(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _run(["bash", str(IMAGE / script)], DRY_RUN="1", **env)


@pytest.mark.parametrize("pkg", ["apt", "dnf"])
def test_full_build_dry_run_installs_driver_toolkit_docker_agent(pkg: str) -> None:
    out = ""
    for script in ("install-base", "install-nvidia", "install-agent", "install-log-forwarder"):
        done = _dry(f"scripts/{script}.sh", CLOUD="aws", PKG=pkg, NVIDIA_DRIVER_BRANCH="550")
        assert done.returncode == 0, done.stderr
        out += done.stdout
    assert "docker" in out
    assert "nvidia-container-toolkit" in out
    assert "nvidia-ctk runtime configure --runtime=docker" in out
    assert ("nvidia:550-server" if pkg == "apt" else "nvidia-driver:550-dkms") in out
    assert "-m venv /opt/corral-agent" in out
    assert "install -D -m 0644" in out and "/usr/lib/systemd/system/corral-agent.service" in out
    assert "amazon-cloudwatch-agent" in out
    assert "systemctl enable corral-agent" not in out  # the bootstrap starts it, not the image


def test_gcp_dry_run_installs_the_ops_agent_with_its_journald_receiver() -> None:
    done = _dry("scripts/install-log-forwarder.sh", CLOUD="gcp", PKG="apt")
    assert done.returncode == 0, done.stderr
    assert "add-google-cloud-ops-agent-repo.sh --also-install" in done.stdout
    assert "/etc/google-cloud-ops-agent/config.yaml" in done.stdout
    assert "amazon-cloudwatch-agent" not in done.stdout
    ops = yaml.safe_load((FILES / "ops-agent.yaml").read_text())
    receivers = ops["logging"]["receivers"]
    (name,) = [k for k, v in receivers.items() if v["type"] == "systemd_journald"]
    assert name in ops["logging"]["service"]["pipelines"]["corral"]["receivers"]


def test_deep_learning_script_installs_only_the_agent_and_the_forwarder() -> None:
    done = _run(["bash", str(IMAGE / "deep-learning-image.sh"), "--dry-run"], CLOUD="aws")
    assert done.returncode == 0, done.stderr
    assert "-m venv /opt/corral-agent" in done.stdout
    assert "amazon-cloudwatch-agent" in done.stdout
    for absent in ("ubuntu-drivers", "nvidia-driver", "docker.io", "nvidia-container-toolkit"):
        assert absent not in done.stdout


def test_a_script_without_cloud_says_so() -> None:
    done = _dry("scripts/install-log-forwarder.sh", PKG="apt", CLOUD="azure")
    assert done.returncode == 1
    assert "set CLOUD=aws or CLOUD=gcp (got 'azure')" in done.stderr


# ---- the baked unit and the bootstrap ------------------------------------------------------
def _settings(**kw: object) -> BootstrapSettings:
    return BootstrapSettings(api_url="https://api.example.com", auth="aws", pool="gpu", **kw)  # type: ignore[arg-type]


def _unit_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_baked_unit_is_the_bootstraps_unit() -> None:
    script = render_bootstrap(_settings())
    written = script.split("<<UNIT\n", 1)[1].split("\nUNIT\n", 1)[0]
    baked = (FILES / "corral-agent.service").read_text()
    assert _unit_lines(written.replace("$AGENT", BAKED_AGENT)) == _unit_lines(baked)


def _boot(tmp_path: Path, script: str, baked: bool) -> subprocess.CompletedProcess[str]:
    if baked:
        unit = tmp_path / "usr/lib/systemd/system/corral-agent.service"
        unit.parent.mkdir(parents=True)
        unit.write_text((FILES / "corral-agent.service").read_text())
    path = tmp_path / "user-data.sh"
    path.write_text(script)
    return _run(
        ["bash", str(path)],
        CORRAL_BOOTSTRAP_ROOT=str(tmp_path),
        CORRAL_BOOTSTRAP_DRY_RUN="1",
        PATH="/usr/bin:/bin",  # no corral-agent anywhere: only the image's unit can start it
    )


def test_bootstrap_starts_the_images_service_as_it_is(tmp_path: Path) -> None:
    done = _boot(tmp_path, render_bootstrap(_settings()), baked=True)
    assert done.returncode == 0, done.stderr
    assert "using the image's corral-agent.service" in done.stderr
    assert done.stdout.strip().splitlines() == [
        "DRY-RUN: systemctl enable --now corral-agent.service"
    ]
    assert not (tmp_path / "etc/systemd/system/corral-agent.service").exists()
    assert json.loads((tmp_path / "etc/corral/agent.yaml").read_text())["pool"] == "gpu"


def test_without_the_baked_unit_the_bootstrap_still_needs_an_agent(tmp_path: Path) -> None:
    done = _boot(tmp_path, render_bootstrap(_settings()), baked=False)
    assert done.returncode == 1
    assert "no corral-agent on this image and no agent wheel URL" in done.stderr


def test_a_wheel_url_installs_and_overrides_the_baked_unit(tmp_path: Path) -> None:
    script = render_bootstrap(_settings(agent_wheel_url="https://cp.example.com/corral.whl"))
    done = _boot(tmp_path, script, baked=True)
    assert done.returncode == 0, done.stderr
    assert "corral[agent] @ https://cp.example.com/corral.whl" in done.stdout
    written = (tmp_path / "etc/systemd/system/corral-agent.service").read_text()
    assert f"ExecStart={BAKED_AGENT} --config /etc/corral/agent.yaml" in written


# ---- the log forwarder's config ---------------------------------------------------------------
@pytest.fixture(scope="module")
def forwarder() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "log_forwarder_config", FILES / "log_forwarder_config.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cloudwatch_agent_ships_the_journal_to_the_pools_group(forwarder: ModuleType) -> None:
    config = forwarder.cloudwatch_config(
        {"cloudwatch_log_group": "/corral/prod", "aws_region": "eu-west-1"}
    )
    (entry,) = config["logs"]["logs_collected"]["files"]["collect_list"]
    assert entry["log_group_name"] == "/corral/prod"
    assert entry["log_stream_name"] == "{instance_id}/journald"
    assert config["agent"]["region"] == "eu-west-1"
    # The file it tails is the one the journal export unit writes.
    export = (FILES / "corral-journal-export.service").read_text()
    assert f"StandardOutput=append:{entry['file_path']}" in export
    # No group configured: the template's default AgentLogGroupName, which the role allows.
    default = forwarder.cloudwatch_config({})
    assert default["logs"]["logs_collected"]["files"]["collect_list"][0]["log_group_name"] == (
        "/corral/agents"
    )
    assert "region" not in default["agent"]


def test_forwarder_print_and_errors(
    forwarder: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = tmp_path / "agent.yaml"
    agent.write_text(json.dumps({"cloudwatch_log_group": "/corral/x"}))
    assert forwarder.main(["--config", str(agent), "--cloud", "aws", "--print"]) == 0
    out = capsys.readouterr().out
    assert '"log_group_name": "/corral/x"' in out
    assert "would run: systemctl start corral-journal-export.service" in out
    assert forwarder.main(["--config", str(agent), "--cloud", "gcp", "--print"]) == 0
    assert "systemctl restart google-cloud-ops-agent" in capsys.readouterr().out
    assert forwarder.main(["--config", str(agent), "--cloud", "azure", "--print"]) == 1
    assert "unknown cloud 'azure'" in capsys.readouterr().err
    assert forwarder.main(["--config", str(tmp_path / "missing"), "--cloud", "aws", "--print"]) == 1
