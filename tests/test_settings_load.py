"""knobs.Settings: the registry's knobs of one environment, parsed once, frozen, typed; the
process's own (knobs.environ) for paths.py and the workers; click options read through it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
import pytest

from ftslurm import knobs, paths
from ftslurm.commands.params import Count, knob_option
from ftslurm.errors import UserError
from ftslurm.replica import plan as planlib
from tests.clirun import invoke

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
# one valid text per kind (choices: the knob's first)
SAMPLE = {"int": "7", "float": "0.25", "bool": "off", "str": "x y", "path": "/tmp/a b"}


def _sample(knob: knobs.Knob) -> str:
    if knob.kind == "choice":
        return knob.choices[-1].upper()
    if knob.kind == "int" and knob.minimum is not None and knob.minimum > 7:
        return str(knob.minimum)
    return SAMPLE[knob.kind]


@pytest.mark.parametrize("name", sorted(knobs.KNOBS))
def test_each_knob_reads_as_knobs_get_reads_it_and_has_its_kinds_type(name: str) -> None:
    knob = knobs.KNOBS[name]
    env = {name: _sample(knob)}
    s = knobs.load(env)
    assert s[name] == getattr(s, name) == knobs.get(env, name)
    assert isinstance(s[name], knobs.KIND_TYPES[knob.kind])
    assert s.is_set(name) and s.raw(name) == env[name]
    for device in ("cuda", "cpu"):
        default = knobs.load({}, device)[name]
        assert default == knobs.get({}, name, device)
        assert default is None or isinstance(default, knobs.KIND_TYPES[knob.kind]), (name, default)


def test_values_are_parsed_once_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    parse = knobs.Knob.parse
    monkeypatch.setattr(knobs.Knob, "parse", lambda self, raw, name=None: (
        calls.append(self.name), parse(self, raw, name))[1])  # fmt: skip
    s = knobs.load({"STEPS": "12", "FT_SPARES": "1"})
    assert sorted(calls) == ["FT_SPARES", "STEPS"]
    assert [s.STEPS, s["STEPS"], s.get("STEPS", "cpu"), s.FT_SPARES] == [12, 12, 12, 1]
    assert sorted(calls) == ["FT_SPARES", "STEPS"]


def test_a_bad_value_is_raised_where_it_is_read_in_the_registrys_words() -> None:
    s = knobs.load({"FTSLURM_CHECKSUM_EVERY": "abc", "FTSLURM_KILL_VIA": "ssh",
                    "FTSLURM_SLOT_EPOCH": "-1"})  # fmt: skip
    assert s.get("FTSLURM_HEAL_TIMEOUT_S") == 600
    with pytest.raises(UserError) as e:  # loading did not raise; the read does
        s.FTSLURM_CHECKSUM_EVERY  # noqa: B018
    assert str(e.value) == ("FTSLURM_CHECKSUM_EVERY='abc' is not an integer: expected a whole "
                            "number >= 0")  # fmt: skip
    with pytest.raises(UserError) as e:  # check: the first bad public knob, in registry order
        s.check()
    assert str(e.value).startswith("FTSLURM_CHECKSUM_EVERY='abc'")
    with pytest.raises(UserError, match="FTSLURM_SLOT_EPOCH=-1 must be at least 0"):
        s["FTSLURM_SLOT_EPOCH"]  # internal: not in check, raised where read
    knobs.load({"FTSLURM_SLOT_EPOCH": "-1"}).check()  # as knobs.check: public knobs only


def test_unknown_names_fail_loudly_and_the_object_is_frozen() -> None:
    s = knobs.load({"STEPS": "3"})
    with pytest.raises(KeyError, match="not a knob"):
        s["STEPSS"]
    with pytest.raises(AttributeError, match="not a knob"):
        s.STEPSS  # noqa: B018
    with pytest.raises(KeyError):
        s.is_set("SLURM_JOB_ID")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.device = "cpu"  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.env["STEPS"] = "4"  # type: ignore[index]


def test_the_snapshot_is_the_environment_at_load_and_secrets_stay_out_of_repr() -> None:
    env = {"STEPS": "3", "WANDB_API_KEY": "sekrit-123", "SLURM_JOB_ID": "9"}
    s = knobs.load(env)
    env["STEPS"] = "4"
    assert s.STEPS == 3 and s.env["SLURM_JOB_ID"] == "9"
    assert "sekrit" not in repr(s) and "sekrit" not in str(s)


def test_blank_is_unset_and_the_device_picks_the_defaults() -> None:
    s = knobs.load({"FTSLURM_CHECKSUM_EVERY": "  ", "STEPS": ""})
    assert not s.is_set("FTSLURM_CHECKSUM_EVERY") and not s.is_set("STEPS")
    assert s.on("cpu").FTSLURM_CHECKSUM_EVERY == 1 and s.on("cuda").FTSLURM_CHECKSUM_EVERY == 50
    with pytest.raises(ValueError, match="depends on the device"):
        s.STEPS  # noqa: B018
    assert knobs.load(s) is s and knobs.load(s, "cpu").STEPS == 200
    assert s.on(None) is s


def test_the_process_settings_follow_os_environ(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:  # fmt: skip
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path / "a"))
    first = knobs.environ()
    assert knobs.environ() is first and knobs.load() is first  # parsed once
    assert paths.outputs_dir() == tmp_path / "a"
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path / "b"))
    assert knobs.environ() is not first and paths.outputs_dir() == tmp_path / "b"
    monkeypatch.setenv("FTSLURM_OUTPUTS", "   ")  # blank: unset, as for every knob
    assert paths.outputs_dir() == paths.project_root() / "outputs"
    monkeypatch.setenv("FTSLURM_EVENTS", str(tmp_path / "ev.jsonl"))
    assert paths.events_log() == tmp_path / "ev.jsonl"
    assert paths.job_python({"FTSLURM_PYTHON": "/opt/py"}) == "/opt/py"


def test_a_plan_built_from_settings_is_the_plan_built_from_the_env() -> None:
    env = {"DEVICE": "cpu", "FTSLURM_REPLICA_ID": "1", "FTSLURM_GROUP_SIZE": "2",
           "SLURM_ARRAY_JOB_ID": "77", "FT_MODE": "per-step", "STEPS": "9",
           "TORCHFT_LIGHTHOUSE": "http://h:1", "FTSLURM_EXTRA_ARGS": "--a.b=1"}  # fmt: skip
    assert planlib.build_ft_plan(knobs.load(env), ROOT) == planlib.build_ft_plan(env, ROOT)
    assert planlib.run_folder(knobs.load(env), ROOT) == planlib.run_folder(env, ROOT)


@click.command()
@knob_option("--every", type=Count(1, 100), default=5, show_default=True,
             knob="FTSLURM_CHECKSUM_EVERY")
def _cmd(every: int) -> None:
    click.echo(f"every={every!r}")


@pytest.mark.parametrize(("raw", "out"), [("7", "every=7"), (" 8 ", "every=8"), ("", "every=5"),
                                          ("   ", "every=5")])  # fmt: skip
def test_a_knob_option_takes_the_registrys_value(raw: str, out: str) -> None:
    r = invoke(command=_cmd, env={"FTSLURM_CHECKSUM_EVERY": raw})
    assert r.exit_code == 0 and r.output.strip() == out, r.output
    r = invoke("--every", "9", command=_cmd, env={"FTSLURM_CHECKSUM_EVERY": "bad"})
    assert r.output.strip() == "every=9"  # the flag wins; the variable is not read


@pytest.mark.parametrize(("raw", "words"), [
    ("٣", "FTSLURM_CHECKSUM_EVERY='٣' is not an integer"),
    ("-1", "FTSLURM_CHECKSUM_EVERY=-1 must be at least 0"),
    ("101", "101 is not in the range 1<=x<=100"),  # the option's own range still applies
])  # fmt: skip
def test_a_bad_knob_option_value_is_one_error_naming_the_knob(raw: str, words: str) -> None:
    r = invoke(command=_cmd, env={"FTSLURM_CHECKSUM_EVERY": raw})
    assert r.exit_code == 2 and "Invalid value for '--every'" in r.output, r.output
    assert words in r.output
