"""Every count and millisecond option takes ASCII decimal digits within a maximum (knobs.to_int's
rules through commands/params.Count): `٢`, `1_0` and 20-digit values are one `Error:` line, as
for --heartbeat-timeout-ms and FT_SPARES."""

from __future__ import annotations

import pytest

from tests.clirun import ftslurm, one_error_line

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
