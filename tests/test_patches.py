"""The records of every upstream attribute the training worker patches (ftslurm/replica/
patches.py): each target is in the pinned wheels, the wrappers of one method run in the stated
order whatever order their modules install them in, a missing target is one line on stderr
and no AttributeError, and `ftslurm doctor --patches` lists them.

Unit tier: torch, torchft and torchtitan are imported (as the other unit tests of the worker
do), no process starts; every patched attribute is put back after each test.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ftslurm import doctor, knobs, stacks, versions
from ftslurm.replica import patches
from ftslurm.replica.worker import fixes
from tests.clirun import invoke

pytestmark = [pytest.mark.unit, pytest.mark.timeout(180)]

REPLICA = Path(__file__).resolve().parent.parent / "ftslurm" / "replica"


@pytest.fixture
def restored(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Every class or module attribute a record patches is put back after the test."""
    for r in patches.RECORDS:
        if r.kind in (patches.WRAP, patches.REPLACE):
            owner_path, attr = r.target.rsplit(".", 1)
            owner = patches.resolve(owner_path)
            monkeypatch.setattr(owner, attr, getattr(owner, attr))
    return monkeypatch


# ---------------------------------------------------------------- the records


@pytest.mark.both_stacks
@pytest.mark.parametrize("record", patches.RECORDS, ids=lambda r: r.name)
def test_every_target_and_need_is_in_the_installed_wheels(record: patches.Patch) -> None:
    assert patches.check(record) is None


@pytest.mark.both_stacks
def test_the_records_are_made_for_the_installed_stack() -> None:
    """A pin moved without the records: re-verify the patches (`ftslurm doctor --patches`,
    the worker's tests, on each stack) and record the new versions in stacks.py."""
    requirements = REPLICA.parents[1] / patches.STACK.requirements
    assert versions.supported_pins(requirements) == {n: f"=={v}"
                                                     for n, v in patches.PINNED.items()}
    for name, version in patches.PINNED.items():
        assert importlib.metadata.version(name).split("+")[0] == version
    assert all(set(r.versions.items()) <= set(patches.PINNED.items()) for r in patches.RECORDS)


def test_each_record_is_whole_and_each_fix_points_to_its_records() -> None:
    names = [r.name for r in patches.RECORDS]
    assert len(names) == len(set(names))
    for r in patches.RECORDS:
        assert r.kind in patches.KINDS and r.why and "\n" not in r.why, r.name
        assert any((REPLICA / d / f"{r.owner}.py").is_file() for d in ("worker", ".")), r.name
        assert r.target.split(".")[0] in patches.DISTRIBUTIONS, r.name
        for switch in r.switches:
            assert switch == patches.ALWAYS or switch.partition("=")[0] in knobs.KNOBS, r.name
        assert r.fixes or r.feature, f"{r.name}: say what is off when it is skipped"
        assert set(r.fixes) <= set(fixes.SWITCHES), r.name
    for fix in fixes.FIXES:
        assert fix.records, f"fix {fix.name} has no patch record"
        assert all(fix.switch in r.switches for r in fix.records)


def test_every_target_wrapped_twice_has_a_stated_order() -> None:
    by_target: dict[str, list[str]] = {}
    for r in patches.RECORDS:
        by_target.setdefault(r.target, []).append(r.name)
    shared = {t: n for t, n in by_target.items() if len(n) > 1}
    assert set(patches.ORDER) == set(shared)
    for target, names in shared.items():
        stated = patches.ORDER[target]
        assert sorted(stated) == sorted(names), target
        kinds = [patches.BY_NAME[n].kind for n in stated]
        # an INSTANCE layer is set on the built object: outside every class layer
        assert kinds == sorted(kinds, key=lambda k: k != patches.INSTANCE), target
    assert patches.ORDER["torchft.manager.Manager.start_quorum"] == (
        "heal_timeout_floor.start_quorum", "slots.start_quorum", "peer_abort.start_quorum")
    assert patches.ORDER["torchtitan.experiments.ft.train.FTTrainer.train_step"] == (
        "slots.train_step", "checksum.train_step")


# ---------------------------------------------------------------- the installer's order


def _layer(tag: str, calls: list[str]) -> Any:
    def make(upstream: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(tag)
            return upstream(*args, **kwargs)

        return wrapper

    return make


def test_the_installer_composes_in_order_whatever_the_install_order(restored) -> None:
    from torchft.manager import Manager

    calls: list[str] = []
    restored.setattr(Manager, "start_quorum", lambda self: calls.append("torchft"))
    # train.py installs peer_watch (fixes.apply) first; here the other way round
    assert patches.install("slots.start_quorum", _layer("slots", calls))
    assert patches.install("peer_abort.start_quorum", _layer("peer_abort", calls))
    assert patches.install("peer_abort.start_quorum", _layer("again", calls))  # idempotent
    Manager.start_quorum(object())
    assert calls == ["slots", "peer_abort", "torchft"]
    assert patches.installed("slots.start_quorum") and patches.installed("peer_abort.start_quorum")


def test_a_target_put_back_starts_a_new_chain(restored) -> None:
    from torchft.manager import Manager

    calls: list[str] = []
    restored.setattr(Manager, "should_commit", lambda self: calls.append("torchft"))
    before = Manager.should_commit
    patches.install("peer_abort.should_commit", _layer("watch", calls))
    Manager.should_commit = before  # what a test's monkeypatch does at teardown
    assert not patches.installed("peer_abort.should_commit")
    patches.install("peer_abort.should_commit", _layer("watch", calls))
    Manager.should_commit(object())
    assert calls == ["watch", "torchft"]


def test_start_quorum_runs_the_floor_then_the_fence_then_the_watch(restored, tmp_path) -> None:
    """The modules' own installs, in the reverse of train.py's order: standby, then fix 8;
    then fix 6's wrapper on the built Manager."""
    from torchft.manager import Manager

    from ftslurm.replica.worker import peer_watch, standby

    calls: list[str] = []
    restored.setattr(Manager, "start_quorum", lambda self, *a, **k: calls.append("torchft"))
    optim = importlib.import_module("torch.optim.optimizer")  # torch.optim's attribute differs
    restored.setattr(optim, "register_optimizer_step_post_hook", lambda hook: None)
    restored.setattr(standby.slots, "fenced_by", lambda root, mine: calls.append("fence"))
    env = {"FTSLURM_SLOTS_DIR": str(tmp_path), "FTSLURM_REPLICA_ID": "0",
           "FTSLURM_SLOT_EPOCH": "1"}  # fmt: skip
    assert standby.install(env) is not None
    peer_watch.install(None, None, 60.0, fixes.record_quorums)
    restored.setattr(fixes, "_raise_timeouts", lambda m, mbps: calls.append("floor") or "floor")
    watch = SimpleNamespace(quorum_started=lambda: calls.append("watch"), say=print,
                            step_started=lambda: calls.append("step"))  # fmt: skip
    manager = object.__new__(Manager)
    manager._ftslurm_peer_watch = watch
    fixes._floor_at_first_quorum(manager, mbps=500)
    manager.start_quorum()
    assert calls == ["floor", "fence", "watch", "torchft", "step"]


def test_train_step_runs_the_fence_then_the_checksum(restored, tmp_path) -> None:
    """standby installed before the checksum (train.py: the other way round)."""
    from torchtitan.experiments.ft.train import FTTrainer

    from ftslurm.replica.worker import checksum, standby

    calls: list[str] = []
    restored.setattr(FTTrainer, "train_step", lambda self, it: calls.append("torchtitan"))
    restored.setattr(standby.slots, "fenced_by", lambda root, mine: calls.append("fence"))
    restored.setenv("FTSLURM_DEVICE", "cpu")  # the checksum inline, no thread
    env = {"FTSLURM_SLOTS_DIR": str(tmp_path), "FTSLURM_REPLICA_ID": "0",
           "FTSLURM_SLOT_EPOCH": "1"}  # fmt: skip
    standby.install(env)
    checksum.install()

    class Trainer:
        step, model_parts = 1, []
        job_config = SimpleNamespace(fault_tolerance=SimpleNamespace(replica_id=0))

        @property
        def ft_manager(self) -> Any:
            calls.append("checksum")
            return SimpleNamespace(enabled=False)

    FTTrainer.train_step(Trainer(), iter(()))
    assert calls == ["fence", "checksum", "torchtitan"]


# ---------------------------------------------------------------- a missing target


MISSING = patches.Patch("test.missing", "torchft.manager.Manager._no_such_method", "fixes",
                        "a record of a method this torchft lacks",
                        ("FTSLURM_FIX_RENDEZVOUS_NAMESPACE",))  # fmt: skip


def _torchft_version(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: version if name == "torchft-nightly" else real(name))


def test_a_missing_target_is_one_line_and_no_exception(restored, capsys) -> None:
    from torchft.manager import Manager

    _torchft_version(restored, "2026.9.30")
    line = ("torchft.manager.Manager._no_such_method: not in torchft-nightly 2026.9.30; "
            "fix rendezvous_namespace is off")  # fmt: skip
    assert patches.check(MISSING) == line
    restored.setitem(patches.BY_NAME, MISSING.name, MISSING)
    assert patches.install(MISSING.name, lambda up: up) is False
    assert not hasattr(Manager, "_no_such_method")
    assert capsys.readouterr().err == f"[ftslurm] patch skipped: {line}\n"
    absent = patches.Patch("test.module", "torchtitan.experiments.gone.Trainer.train_step",
                           "checksum", "why", ("FTSLURM_CHECKSUM_EVERY",), feature="checksums")
    assert patches.check(absent) == (
        "torchtitan.experiments.gone.Trainer.train_step: not in torchtitan 0.2.2; checksums is off")


def test_a_fix_whose_target_is_gone_is_skipped_whole(restored, capsys) -> None:
    """torchft-nightly 2026.9.30 has no Manager._reconfigure_pg: fix 7 is skipped with one
    line, and its other patch (Manager.__init__) is not applied either."""
    from torchft.manager import Manager

    _torchft_version(restored, "2026.9.30")
    restored.delattr(Manager, "_reconfigure_pg")
    init = Manager.__init__
    lines = fixes.apply({}, only=("rendezvous_namespace",))
    line = ("torchft.manager.Manager._reconfigure_pg: not in torchft-nightly 2026.9.30; "
            "fix rendezvous_namespace is off")  # fmt: skip
    assert lines == [f"[ftslurm] fix rendezvous_namespace: SKIPPED ({line})"]
    assert capsys.readouterr().err == f"[ftslurm] patch skipped: {line}\n"
    assert Manager.__init__ is init


def test_the_fix_still_applies_when_its_target_is_there(restored) -> None:
    from torchft.manager import Manager

    init = Manager.__init__
    assert fixes.apply({}, only=("rendezvous_namespace",))[0].startswith(
        "[ftslurm] fix rendezvous_namespace: ON")
    assert Manager.__init__ is not init and patches.installed("rendezvous_namespace.init")


def test_a_missing_attribute_of_a_built_object_is_skipped(capsys) -> None:
    manager = SimpleNamespace()  # no _client
    fixes.record_quorums(manager)
    assert not hasattr(manager, "_client")
    assert capsys.readouterr().err == (
        "[ftslurm] patch skipped: torchft.manager.Manager._client: not on this SimpleNamespace; "
        "fixes rendezvous_namespace, peer_abort are off\n")


# ---------------------------------------------------------------- ftslurm doctor --patches


def test_doctor_lists_every_patch_and_passes_on_the_pinned_stack() -> None:
    result = invoke("doctor", "--patches", "--device", "cpu")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].split() == ["TARGET", "OWNER", "MADE", "FOR", "UPSTREAM", "HERE", "SWITCH"]
    assert len(lines) == 2 + len(patches.RECORDS) + 1
    assert lines[-1] == f"{len(patches.RECORDS)} patches: {len(patches.RECORDS)} here, 0 " \
        "missing (0 with their switch on): all here"
    row = next(x for x in lines if x.split()[:2] == ["torchft.manager.Manager._reconfigure_pg",
                                                     "fixes"])  # fmt: skip
    assert row.split()[2:] == ["torchft-nightly", "2026.10.26", "-", "yes",
                               "FTSLURM_FIX_RENDEZVOUS_NAMESPACE", "(on)"]  # fmt: skip


def test_doctor_fails_only_for_a_missing_patch_that_is_switched_on(monkeypatch) -> None:
    gone = {"rendezvous_namespace.reconfigure_pg": "torchft.manager.Manager._reconfigure_pg: "
            "not in torchft-nightly 2026.9.30; fix rendezvous_namespace is off",
            "cpu.empty_cache": "torch.cpu: not in torch 9.0; training on CPU (DEVICE=cpu) is off"}
    monkeypatch.setattr(doctor, "observe_patches", lambda: gone)
    result = invoke("doctor", "--patches", "--device", "cuda")
    assert result.exit_code == 1, result.output
    assert f"      missing: {gone['rendezvous_namespace.reconfigure_pg']}" in result.output
    assert result.output.splitlines()[-1].endswith("2 missing (1 with their switch on): not ready")
    # the CPU shim is off on cuda; fix 7 switched off too: nothing on is missing
    result = invoke("doctor", "--patches", "--json", "--device", "cuda",
                    env={"FTSLURM_FIX_RENDEZVOUS_NAMESPACE": "0"})  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] is True and report["counts"] == {
        "patches": len(patches.RECORDS), "missing": 2, "missing_on": 0}
    row = next(p for p in report["patches"] if p["name"] == "rendezvous_namespace.reconfigure_pg")
    assert row["present"] is False and row["on"] is False
    assert row["made_for"] == {"torchft-nightly": "2026.10.26"}


def test_a_record_left_out_of_the_installed_stack_is_skipped_with_its_line(restored,
                                                                           capsys) -> None:
    other = next(s.name for s in stacks.STACKS if s is not patches.STACK)
    record = patches.Patch("test.other_stack", f"{patches.MANAGER}.start_quorum", "fixes",
                           "a bug only the other stack has", ("FTSLURM_FIX_PEER_ABORT",),
                           applies_to=(other,))  # fmt: skip
    line = (f"{patches.MANAGER}.start_quorum: fixed upstream in {patches.STACK.name}; "
            "fix peer_abort is off there")  # fmt: skip
    assert patches.check(record) == line
    restored.setitem(patches.BY_NAME, record.name, record)
    assert patches.install(record.name, lambda up: up) is False
    assert capsys.readouterr().err == f"[ftslurm] patch skipped: {line}\n"
    assert all(set(r.applies_to) == {s.name for s in stacks.STACKS} for r in patches.RECORDS)
