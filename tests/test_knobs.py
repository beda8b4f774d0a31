"""The knob registry (ftslurm/knobs.py): its parsers, its checks, the readers that use it, and
the tables generated from it (docs/settings.md, both sbatch scripts), which must not drift."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import api, knobs
from ftslurm.commands.submit import LAUNCHER_KNOBS, export_names
from ftslurm.errors import UserError
from ftslurm.replica import plan as planlib
from ftslurm.replica.launcher import job as launcher
from ftslurm.replica.worker import checksum, early_sync, fixes
from tests.ftjob import KNOB_ENV_RE

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
BOOL_READERS = {
    "FTSLURM_CHECKSUM_ASYNC": lambda env: checksum._background(env),
    "FTSLURM_FIX_HEAL_TIMEOUT": lambda env: fixes.enabled("heal_timeout", env),
    "FTSLURM_EARLY_FIRST_SYNC": lambda env: fixes.switch_on(early_sync.SWITCH, env),
    "FTSLURM_SINGLE_NODE": lambda env: knobs.get(env, "FTSLURM_SINGLE_NODE"),
}


@pytest.mark.parametrize("word", ["1", "true", "TRUE", "Yes", "on", " On "])
@pytest.mark.parametrize("name", sorted(BOOL_READERS))
def test_every_boolean_reader_takes_every_spelling_of_on(name: str, word: str) -> None:
    assert BOOL_READERS[name]({name: word, "FTSLURM_DEVICE": "cpu"}) is True


@pytest.mark.parametrize("word", ["0", "false", "False", "no", "NO", "off", "Off"])
@pytest.mark.parametrize("name", sorted(BOOL_READERS))
def test_every_boolean_reader_takes_every_spelling_of_off(name: str, word: str) -> None:
    """FTSLURM_CHECKSUM_ASYNC=off used to leave the background hash on."""
    assert BOOL_READERS[name]({name: word, "FTSLURM_DEVICE": "cuda"}) is False


@pytest.mark.parametrize("name", sorted(BOOL_READERS))
def test_a_boolean_that_is_none_of_them_names_the_knob_and_the_words(name: str) -> None:
    with pytest.raises(UserError) as e:
        BOOL_READERS[name]({name: "maybe"})
    assert str(e.value) == (
        f"{name}='maybe' is not a boolean: use 1/0, true/false, yes/no or on/off"
    )


def test_blank_is_unset_and_defaults_may_depend_on_the_device() -> None:
    assert knobs.get({"FTSLURM_CHECKSUM_EVERY": " "}, "FTSLURM_CHECKSUM_EVERY", "cuda") == 50
    assert knobs.get({}, "FTSLURM_CHECKSUM_EVERY", "cpu") == 1
    assert knobs.get({"FTSLURM_CHECKSUM_EVERY": " 7 "}, "FTSLURM_CHECKSUM_EVERY", "cpu") == 7
    assert checksum._every({"FTSLURM_DEVICE": "cpu"}) == 1
    assert checksum._every({}) == 50
    assert knobs.get({}, "FTSLURM_CHECKSUM_ASYNC", "cpu") is False
    with pytest.raises(ValueError, match="depends on the device"):
        knobs.get({}, "STEPS")
    assert knobs.get({"DEVICE": "CPU"}, "DEVICE") == "cpu"
    assert knobs.get({}, "PG_TIMEOUT_S") is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FTSLURM_CHECKSUM_EVERY": "abc"},
         "FTSLURM_CHECKSUM_EVERY='abc' is not an integer: expected a whole number >= 0"),
        ({"FTSLURM_CHECKSUM_EVERY": "-1"}, "FTSLURM_CHECKSUM_EVERY=-1 must be at least 0"),
        ({"FTSLURM_HEAL_TIMEOUT_S": "1.5"},
         "FTSLURM_HEAL_TIMEOUT_S='1.5' is not an integer: expected a whole number from 1 to 86400"),
        ({"PG_TIMEOUT_S": "90000"}, "PG_TIMEOUT_S=90000 is more than a day (86400 s); it is in "
         "seconds (e.g. PG_TIMEOUT_S=120)"),
        ({"RDZV_PORT": "65536"}, "RDZV_PORT=65536 is not a port (1 to 65535)"),
        ({"FTSLURM_KILL_VIA": "ssh"},
         "FTSLURM_KILL_VIA='ssh' is not supported; use FTSLURM_KILL_VIA=auto, "
         "FTSLURM_KILL_VIA=srun or FTSLURM_KILL_VIA=local"),
        ({"DEVICE": "tpu"}, "DEVICE='tpu' is not supported; use DEVICE=cuda or DEVICE=cpu"),
        ({"FTSLURM_DRY_RUN": "2"},
         "FTSLURM_DRY_RUN='2' is not a boolean: use 1/0, true/false, yes/no or on/off"),
    ],
)  # fmt: skip
def test_check_refuses_a_bad_public_knob_in_one_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(UserError) as e:
        knobs.check(env)
    assert str(e.value) == message


def test_check_passes_good_values_and_leaves_internal_channels_to_their_readers() -> None:
    good = {"FTSLURM_CHECKSUM_EVERY": "0", "FTSLURM_CHECKSUM_ASYNC": "Off", "STEPS": "5",
            "FT_MODE": "DiLoCo", "FTSLURM_EXTRA_ARGS": "--x 'y'", "RDZV_PORT": "65535"}  # fmt: skip
    knobs.check(good)
    knobs.check({"FTSLURM_LAUNCHER_PID": "x", "FTSLURM_REPLICA_ID": "y"})  # set by us, not users
    assert knobs.get(good, "FT_MODE") == "diloco"


def test_float_knobs_parse_finite_numbers_only() -> None:
    knob = knobs.Knob("X_RATIO", "float", "a ratio", 0.5, minimum=0)
    assert knob.parse(" 2.5 ") == 2.5
    for bad, says in (("nan", "is not a number"), ("inf", "is not a number"),
                      ("-1", "must be at least 0")):  # fmt: skip
        with pytest.raises(UserError, match=re.escape(says)):
            knob.parse(bad)


def test_every_knob_is_well_formed() -> None:
    for k in knobs.KNOBS.values():
        assert k.kind in knobs.KINDS, k.name
        assert k.where in ("job", "cli"), k.name
        assert set(k.scripts) <= set(knobs.SCRIPTS), k.name
        assert k.doc and "\n" not in k.doc, k.name
        assert bool(k.choices) == (k.kind == "choice"), k.name
        for value in (k.default, k.cpu_default):
            if value is not None:  # a default is a value the knob itself would accept
                shown = str(int(value)) if isinstance(value, bool) else str(value)
                assert k.parse(shown) == value, k.name


def test_the_registry_lists_every_ftslurm_variable_the_package_reads() -> None:
    """A new FTSLURM_* variable in the code must be registered (typed, documented, checked)."""
    used = set()
    for path in (ROOT / "ftslurm").rglob("*.py"):
        used |= set(re.findall(r"\bFTSLURM_[A-Z][A-Z_]*[A-Z]\b", path.read_text()))
    assert sorted(used - set(knobs.KNOBS)) == []


def test_presets_switches_and_secrets_agree_with_their_modules() -> None:
    assert knobs.KNOBS["FTSLURM_PRESET"].choices == tuple(planlib.PRESETS)
    for switch in [*fixes.SWITCHES.values(), early_sync.SWITCH]:
        assert knobs.KNOBS[switch].kind == "bool" and knobs.KNOBS[switch].default is True
    assert knobs.SECRETS == ("WANDB_API_KEY", "HF_TOKEN")
    assert set(knobs.INTERNAL) >= {"FTSLURM_REPLICA_ID", "FTSLURM_GROUP_SIZE",
                                   "FTSLURM_ATTEMPT", "FTSLURM_RUN_ID"}  # fmt: skip


def test_the_job_gets_every_knob_set_under_a_restricting_export() -> None:
    env = {k.name: "1" for k in knobs.public("job")}
    names = export_names(env)
    assert set(names) == {k.name for k in knobs.public("job")}
    assert "HF_TOKEN" not in LAUNCHER_KNOBS and "RDZV_PORT" in LAUNCHER_KNOBS


def test_tests_drop_every_knob_of_the_caller() -> None:
    for name in knobs.KNOBS:
        assert KNOB_ENV_RE.match(name), name
    assert not KNOB_ENV_RE.match("PATH") and not KNOB_ENV_RE.match("DEVICES")


def test_api_config_takes_knob_names_from_the_registry() -> None:
    assert api._knobs({"STEPS": 50, "DEVICE": "cpu"}) == {"STEPS": "50", "DEVICE": "cpu"}
    with pytest.raises(UserError, match=r"config has STEP, NCCL_DEBUG: not a knob read on the "):
        api._knobs({"STEP": "50", "NCCL_DEBUG": "INFO"})
    with pytest.raises(UserError, match="is in seconds"):  # values: checked by the preflight
        api.submit_ft_array(2, {"DEVICE": "cpu", "PG_TIMEOUT_S": "120000"}, "http://h:1")


def test_api_replica_task_drops_stale_internal_channels() -> None:
    task = api.ReplicaTask("job", {"DEVICE": "cpu"}, "/o")
    env = task.env({"SLURM_ARRAY_JOB_ID": "4", "FTSLURM_REPLICA_ID": "3", "FTSLURM_ATTEMPT": "9"})
    assert "FTSLURM_REPLICA_ID" not in env and "FTSLURM_ATTEMPT" not in env


def test_the_launcher_dry_run_takes_yes_as_true(tmp_path: Path, capsys) -> None:
    env = {"FTSLURM_DRY_RUN": "yes", "DEVICE": "cpu", "FTSLURM_REPLICA_ID": "0",
           "FTSLURM_GROUP_SIZE": "1", "FTSLURM_OUTPUTS": str(tmp_path), "PATH": ""}  # fmt: skip
    assert launcher.main(["job"], env) == 0
    assert "dry run (FTSLURM_DRY_RUN=1): nothing started" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# Generated tables


@pytest.mark.parametrize("path", sorted(knobs.rendered(ROOT)), ids=lambda p: p.name)
def test_committed_knob_tables_match_the_registry(path: Path) -> None:
    """Fails when docs/settings.md or a script's header no longer says what the registry says:
    run `python -m ftslurm.knobs --write`."""
    assert path.read_text() == knobs.rendered(ROOT)[path], (
        f"{path.name}: its knob table drifted from ftslurm/knobs.py; run "
        "`python -m ftslurm.knobs --write`"
    )


def test_the_tables_name_every_public_knob_once_and_no_internal_one() -> None:
    md = knobs.markdown()
    for k in knobs.KNOBS.values():
        assert md.count(f"| `{k.name}` |") == (1 if k.public else 0), k.name
    ft, classic = knobs.shell_comment("ft"), knobs.shell_comment("classic")
    assert "RDZV_PORT" in classic and "RDZV_PORT" not in ft
    assert "FTSLURM_FIX_HEAL_TIMEOUT" in ft and "FTSLURM_FIX_HEAL_TIMEOUT" not in classic
    assert "| `STEPS` | `1000` (`200` with `DEVICE=cpu`) | training steps (>= 1) |" in md
    assert re.search(r"^#   STEPS +training steps \[1000 \(200 with DEVICE=cpu\)\]$", ft, re.M)
    assert max(len(line) for line in (ft + classic).splitlines()) <= 100


def test_a_drifted_block_is_found_and_rewritten(tmp_path: Path) -> None:
    for name in [knobs.SETTINGS_PAGE, *knobs.SCRIPTS.values()]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text())
    page = tmp_path / knobs.SETTINGS_PAGE
    page.write_text(page.read_text().replace("| `STEPS` |", "| `STEPZ` |"))
    assert knobs.rendered(tmp_path)[page] == (ROOT / knobs.SETTINGS_PAGE).read_text()
    (tmp_path / knobs.SCRIPTS["ft"]).write_text("#!/bin/bash\n# no knob block\n")
    with pytest.raises(UserError, match="no knob block"):
        knobs.rendered(tmp_path)


@pytest.mark.process
def test_the_command_line_prints_the_tables() -> None:
    out = subprocess.run([sys.executable, "-m", "ftslurm.knobs", "--shell-comment", "classic"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert out.returncode == 0 and out.stdout == knobs.shell_comment("classic")


def test_an_equal_environment_is_parsed_once_and_a_changed_one_again() -> None:
    """The launcher passes one environment to a dozen readers: load parses it once (the
    same Settings back), and a changed or mutated environment is parsed again, never stale."""
    env = {"STEPS": "7", "FTSLURM_DRY_RUN": "1"}
    first = knobs.load(env)
    assert knobs.load(dict(env)) is first and knobs.load(env).STEPS == 7
    assert knobs.load(env, "cuda").device == "cuda" and knobs.load(env).device is None
    env["STEPS"] = "8"  # the snapshot is a copy: the earlier Settings keep 7
    assert knobs.load(env).STEPS == 8 and first.STEPS == 7
    bad = knobs.load({"STEPS": "x"})
    with pytest.raises(UserError, match="STEPS"):
        _ = bad.STEPS
    with pytest.raises(UserError, match="STEPS"):  # the kept error, raised on each read
        _ = knobs.load({"STEPS": "x"}).STEPS
