"""An unsupported torchtitan / torch / torchft build, or a Lighthouse of another torchft build, is
one line naming the supported pins with exit code 2: in `ftslurm doctor` and in the launcher's
start-up check (version metadata faked; nothing imported, no Slurm)."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from ftslurm import doctor as d
from ftslurm import stacks, versions
from ftslurm.errors import UserError
from ftslurm.replica.launcher import job

pytestmark = [pytest.mark.unit, pytest.mark.both_stacks]

PINS = {"torch": "==2.13.0", "torchtitan": "==0.2.2", "torchft-nightly": "==2026.10.26"}
GOOD = {"torch": "2.13.0+cpu", "torchtitan": "0.2.2", "torchft-nightly": "2026.10.26"}


def _fake_metadata(monkeypatch: pytest.MonkeyPatch, **versions: str) -> None:
    real = importlib.metadata.version
    fake = {"torchtitan": "0.4.0", **{k.replace("_", "-"): v for k, v in versions.items()}}

    def version(name: str) -> str:
        return fake.get(name, None) or real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)


def test_the_pins_are_requirements_txt_and_the_cpu_extra() -> None:
    assert versions.supported_pins() == PINS
    assert versions.supported_pins(Path("/nonexistent/requirements.txt")) == PINS  # the cpu extra


@pytest.mark.parametrize("stack", stacks.STACKS, ids=lambda s: s.name)
def test_each_stack_s_pins_are_its_requirements_file_and_its_extra(stack: stacks.Stack) -> None:
    import tomllib

    root = Path(__file__).resolve().parents[1]
    want = {d: f"=={v}" for d, v in stack.pins}
    assert versions.supported_pins(root / stack.requirements) == want
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"][stack.extra]  # fmt: skip
    core = {versions.normalize(r.name): r.spec for r in versions.parse_requirements(
        "\n".join(extra)) if versions.normalize(r.name) in want}  # fmt: skip
    assert core == want


def test_doctor_with_a_torchtitan_no_stack_is_for_is_one_line_naming_both(monkeypatch,
                                                                           capsys) -> None:
    from ftslurm import cli

    _fake_metadata(monkeypatch)
    monkeypatch.setattr(d, "lighthouse_torchft_version", lambda: None)
    monkeypatch.setattr(sys, "argv", ["ftslurm", "doctor"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.count("\n") == 1, err
    assert err.startswith("Error: torchtitan 0.4.0 is not supported; supported: ")
    assert "torch==2.13.0, torchtitan==0.2.2, torchft-nightly==2026.10.26" in err
    assert "torch==2.15.0, torchtitan==0.3.0, torchft-nightly==2026.10.26" in err
    assert "pip install 'ftslurm[titan03]'" in err


def test_torchtitan_0_3_on_torch_2_13_names_its_stack_s_torch() -> None:
    """torchtitan 0.3 declares no torch: on 2.13 it trains one step, then fails in
    `dist.set_timeout` (docs/cpu/2026-11-29/titan03-probe/raw/26)."""
    have = {"torch": "2.13.0+cpu", "torchtitan": "0.3.0", "torchft-nightly": "2026.10.26"}
    line = versions.stack_problem(have)
    assert line == ("torch 2.13.0+cpu is not supported; supported with torchtitan-0.3: "
                    "torch==2.15.0, torchtitan==0.3.0, torchft-nightly==2026.10.26 (pip install "
                    "-r requirements-titan03.txt, or pip install 'ftslurm[titan03]')")  # fmt: skip
    assert versions.stack_problem({**have, "torch": "2.15.0+cu132"}) is None
    assert versions.stack_problem(GOOD) is None
    # the tiny worker (no torchtitan) runs on either stack's torch
    for torch in ("2.13.0+cpu", "2.15.0"):
        assert versions.stack_problem({**have, "torch": torch, "torchtitan": None},
                                      worker="tiny") is None  # fmt: skip


@pytest.mark.parametrize("name, have", [("torch", "2.12.1+cu126"),
                                        ("torchft-nightly", "2026.11.20")])  # fmt: skip
def test_another_torch_or_torchft_build_is_named(name: str, have: str) -> None:
    line = versions.version_problem({**GOOD, name: have}, PINS)
    assert line is not None
    assert line.startswith(f"{name} {have} is not supported; supported with torchtitan-0.2: ")


def test_a_missing_package_is_left_to_the_packages_check() -> None:
    assert versions.version_problem({**GOOD, "torchtitan": None}, PINS) is None
    assert versions.version_problem(GOOD, PINS) is None


def test_a_lighthouse_of_another_torchft_build_is_named() -> None:
    line = versions.version_problem(GOOD, PINS, lighthouse_torchft="2026.09.01")
    assert line is not None
    assert line.startswith("the Lighthouse runs torchft 2026.09.01 but this environment has "
                           "2026.10.26")  # fmt: skip
    assert versions.version_problem(GOOD, PINS, lighthouse_torchft="2026.10.26") is None


def test_the_managed_lighthouse_in_this_interpreter_has_this_torchft(tmp_path, monkeypatch):
    """The Lighthouse's interpreter is read from its running process: this test's own."""
    import os
    from types import SimpleNamespace

    from ftslurm import lighthouse

    monkeypatch.setattr(lighthouse, "status",
                        lambda *a, **k: SimpleNamespace(running=True, pid=os.getpid()))  # fmt: skip
    _fake_metadata(monkeypatch, torchft_nightly="2026.09.01")
    assert d.lighthouse_torchft_version(tmp_path) == "2026.09.01"
    monkeypatch.setattr(lighthouse, "status",
                        lambda *a, **k: SimpleNamespace(running=False, pid=None))  # fmt: skip
    assert d.lighthouse_torchft_version(tmp_path) is None


def test_the_launcher_refuses_an_unsupported_build_before_it_starts(monkeypatch, tmp_path):
    _fake_metadata(monkeypatch)
    with pytest.raises(UserError, match=r"^torchtitan 0\.4\.0 is not supported; supported: "):
        versions.check_stack()
    versions.check_stack("tiny")  # the tiny worker runs without torchtitan
    env = {"SLURM_ARRAY_JOB_ID": "9", "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2",
           "DEVICE": "cpu", "FTSLURM_OUTPUTS": str(tmp_path), "FTSLURM_TORCHRUN": "/bin/false",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    monkeypatch.setattr(job, "_prepare", lambda plan, root: None)  # no assets to build
    with pytest.raises(UserError, match="torchtitan 0.4.0 is not supported"):
        job.main(["job"], env)
    assert not (tmp_path / "torchft" / "tft-9" / "failures").exists()  # not the node's fault


def test_doctor_names_the_installed_stack_and_the_other() -> None:
    old = d.check_training_stack(GOOD)
    assert old.status == d.PASS
    assert old.detail.startswith("torchtitan-0.2: torchtitan 0.2.2, torch 2.13.0, "
                                 "torchft-nightly 2026.10.26; presets from the TOML presets")
    assert "also supported: torchtitan-0.3 (torchtitan 0.3.0, torch 2.15.0" in old.detail
    new = d.check_training_stack({**GOOD, "torchtitan": "0.3.0", "torch": "2.15.0"})
    assert new.detail.startswith("torchtitan-0.3: ") and "config functions" in new.detail
    none = d.check_training_stack({**GOOD, "torchtitan": None})
    assert none.status == d.FAIL and "ftslurm[titan03]" in none.fix
