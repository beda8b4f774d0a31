"""Click parameter types shared by the commands.

click's FloatRange lets `nan` through (every comparison with nan is false) and `inf` when there
is no maximum: `--down-for nan` printed a plan with `sleep nan`, `--down-for inf` would keep a
node DOWN for good. Durations and sizes here are finite.

click's IntRange takes whatever int() takes: "٣" (an Arabic-Indic three), "1_0" and
18446744073709551615 (a u64 the Lighthouse then misreads). `Count` takes ASCII decimal digits
only, within a maximum, through the knobs' one int parser.

An option that reads an environment variable is a `knob_option`: the variable is a knob of
ftslurm/knobs.py, and its value is the registry's (parsed by the knob's rules, blank = unset,
as the job and the other commands read it), not click's own reading of the text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import click

from ftslurm import knobs
from ftslurm.errors import UserError

DAY_S = 86_400.0


class FiniteFloat(click.FloatRange):
    """A FloatRange that also refuses nan and +-inf."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def seconds(min_open: bool = False, max_s: float | None = DAY_S) -> FiniteFloat:
    """Seconds >= 0 (> 0 with `min_open`), at most a day unless `max_s` says otherwise."""
    return FiniteFloat(min=0.0, min_open=min_open, max=max_s)


INT64 = 2**63 - 1
DAY_MS = 86_400_000


class Count(click.IntRange):
    """An IntRange of ASCII decimal digits (knobs.to_int's rules) with a maximum always."""

    def __init__(self, min: int = 0, max: int = INT64) -> None:  # noqa: A002 - click's names
        super().__init__(min=min, max=max)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return super().convert(value, param, ctx)
        try:
            return knobs.to_int("value", str(value), self.min, self.max)
        except UserError as e:
            self.fail(str(e).removeprefix("value=") + ".", param, ctx)


def replicas(minimum: int = 0) -> Count:
    """A count of replicas or spares: at most knobs.MAX_REPLICAS (FT_SPARES's maximum)."""
    return Count(minimum, knobs.MAX_REPLICAS)


def milliseconds(minimum: int = 0) -> Count:
    """Milliseconds >= `minimum`, at most a day (a timeout typed in microseconds is a typo)."""
    return Count(minimum, DAY_MS)


_DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() is true for "²", int() fails


class ArrayJobId(click.ParamType):
    """An array job id: `42`, or `42_1` as squeue shows one task (the job is 42; commands that
    can show one replica take the `_1` as the replica)."""

    name = "JOB"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        text = str(value).strip()
        job, sep, task = text.partition("_")
        if _DIGITS.fullmatch(job) and int(job) >= 1 and (not sep or _DIGITS.fullmatch(task)):
            return int(job), (int(task) if task else None)
        self.fail(f"{value!r} is not a job id (42, or 42_1 as squeue shows a task).", param, ctx)


class KnobOption(click.Option):
    """An option whose `envvar` is a knob of the registry, read through it (`knobs.environ()`):
    the value the option gets from the environment is the knob's, parsed by its rules (a bad one
    is click's one-line error for the option, with the registry's words naming the knob). The
    option's own type then converts it as it would the flag's text (its range still applies)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.envvar, str) or self.envvar not in knobs.KNOBS:
            raise TypeError(f"{self.opts}: envvar {self.envvar!r} is not a knob of "
                            "ftslurm/knobs.py: register it there")  # fmt: skip

    def value_from_envvar(self, ctx: click.Context) -> Any:
        settings = knobs.environ()
        name = str(self.envvar)
        try:
            return settings[name] if settings.is_set(name) else None
        except UserError as e:
            raise click.BadParameter(f"{e}.", ctx=ctx, param=self) from None


def knob_option(*decls: str, knob: str, **attrs: Any) -> Callable[[Any], Any]:
    """`click.option(*decls, envvar=knob, **attrs)` whose environment value is the registry's
    (see KnobOption)."""
    return click.option(*decls, cls=KnobOption, envvar=knob, **attrs)
