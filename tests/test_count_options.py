"""Every count and millisecond option takes ASCII decimal digits within a maximum (knobs.to_int's
rules through commands/params.Count), and so do the knobs behind them: `٢`, `1_0` and 20-digit
values are one `Error:` line, from the command line or the environment (FT_SPARES,
FTSLURM_LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS)."""

from __future__ import annotations

import click
import pytest

from ftslurm import knobs
from ftslurm.errors import UserError
from tests.clirun import ftslurm, invoke, one_error_line

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("argv, expected", [
    (["lighthouse", "start", "--quorum-tick-ms", "٣"], "'--quorum-tick-ms': '٣' is not an integer"),
    (["lighthouse", "start", "--join-timeout-ms", "99999999999999999999"],
     "'--join-timeout-ms': 99999999999999999999 must be at most 86400000"),
    (["lighthouse", "start", "--min-replicas", "1_0"], "'--min-replicas': '1_0' is not an integer"),
    (["lighthouse", "restart", "--min-replicas", "٢"], "'--min-replicas': '٢' is not an integer"),
    (["submit", "--spares", "٢", "--array=0-2", "x.sh"], "'--spares': '٢' is not an integer"),
    (["submit", "--spares", "10001", "--array=0-2", "x.sh"], "'--spares': 10001"),
])  # fmt: skip
def test_count_options_take_ascii_digits_within_a_maximum(tmp_path, argv, expected) -> None:
    r = ftslurm(*argv, cwd=tmp_path, inherit=False,
                env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                     "FTSLURM_LIGHTHOUSE_DIR": str(tmp_path / "lh")})  # fmt: skip
    assert expected in one_error_line(r)


@pytest.mark.parametrize("raw", ["٢", "1_0", "99999999999999999999", "²", "1e3", "0x10"])
def test_ft_spares_takes_ascii_decimal_within_its_maximum(raw: str) -> None:
    with pytest.raises(UserError, match="FT_SPARES="):
        knobs.get({"FT_SPARES": raw}, "FT_SPARES")
    assert knobs.get({"FT_SPARES": " 2 "}, "FT_SPARES") == 2


@pytest.mark.parametrize("raw", ["٢", "1_0", "99999999999999999999"])
def test_the_demo_refuses_a_bad_ft_spares_in_one_line(raw: str) -> None:
    out = ftslurm("demo", "--backend", "local", "--dry-run", env={"FT_SPARES": raw},
                  timeout=20)
    line = one_error_line(out)
    assert "--spares" in line


@pytest.mark.parametrize("raw", ["18446744073709551615", "٣", "1_0", "86400001", "0"])
def test_heartbeat_timeout_ms_takes_ascii_decimal_within_a_day(raw: str) -> None:
    r = invoke("lighthouse", "start", "--heartbeat-timeout-ms", raw,
               "--state-dir", "/nonexistent/never-used")  # fmt: skip
    assert r.exit_code == 2 and "Invalid value for '--heartbeat-timeout-ms'" in r.output, r.output
    r = invoke("lighthouse", "start", "--state-dir", "/nonexistent/x",
               env={"FTSLURM_LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS": raw})
    assert r.exit_code == 2 and "Invalid value for '--heartbeat-timeout-ms'" in r.output, r.output


def test_the_count_param_type() -> None:
    from ftslurm.commands.params import Count

    assert Count(1, 5).convert("3", None, None) == 3
    assert Count(1, 5).convert(4, None, None) == 4
    for bad in ("6", "٣", "1_0", "", "3.0"):
        with pytest.raises(click.BadParameter):
            Count(1, 5).convert(bad, None, None)
