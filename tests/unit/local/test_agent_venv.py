"""The local stack's agent install: cached by the wheel's content, rebuilt when the code
changed or a build did not finish, the newest few kept. The wheel and pip steps are replaced
by fakes here (the real ones run in every local-stack test, and
``benchmarks/local_stack_first_trial.py --venv-only`` times them)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from corral.local import agent_venv


def make_wheel(path: Path, content: bytes, when: tuple[int, ...]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(zipfile.ZipInfo("agent_runtime/main.py", when), content)
        archive.writestr(zipfile.ZipInfo("corral-0.1.0.dist-info/METADATA", when), b"Name: corral")
    return path


def test_the_digest_is_the_wheels_content_not_its_timestamps(tmp_path: Path) -> None:
    one = make_wheel(tmp_path / "a.whl", b"print(1)", (2026, 1, 1, 0, 0, 0))
    same = make_wheel(tmp_path / "b.whl", b"print(1)", (2026, 6, 1, 12, 0, 0))
    other = make_wheel(tmp_path / "c.whl", b"print(2)", (2026, 1, 1, 0, 0, 0))
    assert one.read_bytes() != same.read_bytes()
    assert agent_venv.wheel_digest(one) == agent_venv.wheel_digest(same)
    assert agent_venv.wheel_digest(one) != agent_venv.wheel_digest(other)


@pytest.fixture
def builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Fake wheel builds (their content is ``code["text"]``) and installs (counted)."""
    state: dict[str, object] = {"text": b"v1", "installs": 0, "fail": False}

    def build_wheel(root: Path, out: Path) -> Path:
        return make_wheel(
            out / "corral-0.1.0-py3-none-any.whl", state["text"], (2026, 1, 1, 0, 0, 0)
        )  # type: ignore[arg-type]

    def install(wheel: Path, venv: Path) -> None:
        state["installs"] = int(state["installs"]) + 1  # type: ignore[call-overload]
        (venv / "bin").mkdir(parents=True)
        if state["fail"]:
            raise agent_venv.AgentInstallError("installing corral[agent] failed (1): no network")
        (venv / "bin" / "corral-agent").write_text("#!/bin/sh\n")

    monkeypatch.setattr(agent_venv, "build_wheel", build_wheel)
    monkeypatch.setattr(agent_venv, "install", install)
    return state


def test_unchanged_code_reuses_the_venv_and_a_change_builds_another(
    tmp_path: Path, builds: dict[str, object]
) -> None:
    cache = tmp_path / "cache"
    first = agent_venv.agent_install(tmp_path, cache)
    assert agent_venv.agent_install(tmp_path, cache) == first
    assert builds["installs"] == 1
    builds["text"] = b"v2"
    second = agent_venv.agent_install(tmp_path, cache)
    assert second != first and builds["installs"] == 2
    assert (second / "bin" / "corral-agent").exists()


def test_a_build_that_did_not_finish_is_built_again(
    tmp_path: Path, builds: dict[str, object]
) -> None:
    cache = tmp_path / "cache"
    builds["fail"] = True
    with pytest.raises(agent_venv.AgentInstallError, match="no network"):
        agent_venv.agent_install(tmp_path, cache)
    builds["fail"] = False
    venv = agent_venv.agent_install(tmp_path, cache)
    assert builds["installs"] == 2 and (venv / "bin" / "corral-agent").exists()


def test_only_the_newest_venvs_are_kept(tmp_path: Path, builds: dict[str, object]) -> None:
    cache = tmp_path / "cache"
    made = []
    for n in range(agent_venv.KEEP + 2):
        builds["text"] = f"v{n}".encode()
        made.append(agent_venv.agent_install(tmp_path, cache))
    kept = sorted(p for p in cache.iterdir() if p.is_dir())
    assert len(kept) == agent_venv.KEEP
    assert made[-1] in kept and made[0] not in kept
