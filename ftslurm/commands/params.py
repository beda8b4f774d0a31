"""Click parameter types shared by the commands.

click's FloatRange lets `nan` through (every comparison with nan is false) and `inf` when there
is no maximum: `--down-for nan` printed a plan with `sleep nan`, `--down-for inf` would keep a
node DOWN for good. Durations and sizes here are finite.
"""

from __future__ import annotations

import math
import re
from typing import Any

import click

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
