"""Every option of a Lighthouse start, with its default, in one frozen dataclass.

Built once, from the CLI's options or the API's keyword arguments, and validated when built:
`start`, `restart` and `exec_foreground` take it whole instead of loose parameters, and
`restart` gets it from the record of the last start (`lifecycle.recorded_config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftslurm.errors import UserError
from ftslurm.knobs import HEARTBEAT_TIMEOUT_FLOOR_MS, TORCHFT_HEARTBEAT_INTERVAL_MS
from ftslurm.lighthouse.address import DEFAULT_PORT, check_advertise, format_bind, parse_bind

# the binary's own options, recorded in the state file as "config" (what `status` shows)
BINARY_OPTIONS = (
    "bind", "min_replicas", "quorum_tick_ms", "join_timeout_ms", "heartbeat_timeout_ms",
    "advertise",
)  # fmt: skip


def safe_min_replicas(replicas: int) -> int:
    """The --min-replicas for `replicas` replicas: more than half of them from 3 on, so that
    two groups that ask apart (after a Lighthouse restart) cannot both get a quorum and train
    apart (torchft's advice against split brain); 1 for 2 or fewer, where a majority is every
    replica and the survivor could not train through a failure."""
    return replicas // 2 + 1 if replicas >= 3 else 1


def check_heartbeat_timeout(ms: int | None, what: str = "--heartbeat-timeout-ms") -> None:
    """Refuse a heartbeat timeout under two of torchft's heartbeat intervals (`what` names
    where it came from; "" where click names the option): the Lighthouse would drop live
    replicas between their heartbeats, and each one's watchdog would kill it (exit 137) a few
    seconds into every attempt. The one check of every way to set it: `lighthouse start` and
    `restart`, the demo, a recorded config."""
    if ms is not None and ms < HEARTBEAT_TIMEOUT_FLOOR_MS:
        raise UserError(
            f"{what + ' ' if what else ''}{ms} is below {HEARTBEAT_TIMEOUT_FLOOR_MS} ms, twice "
            f"torchft's heartbeat interval ({TORCHFT_HEARTBEAT_INTERVAL_MS} ms): live replicas "
            f"would be dropped; use --heartbeat-timeout-ms {HEARTBEAT_TIMEOUT_FLOOR_MS} or more "
            f"(default {LighthouseConfig.heartbeat_timeout_ms})"
        )


@dataclass(frozen=True)
class LighthouseConfig:
    """The options of a start. The binary's follow the cluster guide:
    `--min_replicas 1 --quorum_tick_ms 100 --join_timeout_ms 10000`, port 29510; the heartbeat
    timeout is ftslurm's choice (see `heartbeat_timeout_ms`)."""

    bind: str = f":{DEFAULT_PORT}"
    min_replicas: int = 1
    quorum_tick_ms: int = 100
    join_timeout_ms: int = 10000
    # 2000, not torchft's 5000: failures are detected 3 s sooner, and a 30-minute soak on a
    # loaded 2-core machine has no false drop at 2000 (docs/benchmarks-cpu.md). None: the
    # binary's own default
    heartbeat_timeout_ms: int | None = 2000
    advertise: str | None = None  # None: the bind address if specific, else this hostname
    binary: str | None = None  # None or "": FTSLURM_LIGHTHOUSE_BIN, else the fast launcher
    log_max_mb: float = 64.0  # the log is rotated past this, at start and while it runs
    ready_timeout: float = 60.0  # seconds to wait for the HTTP port to answer
    state_dir: Path | None = None  # None: ftslurm.paths.lighthouse_dir()

    def __post_init__(self) -> None:
        if self.state_dir is not None:
            object.__setattr__(self, "state_dir", Path(self.state_dir))
        parse_bind(self.bind)
        check_advertise(self.advertise)
        for name in ("min_replicas", "quorum_tick_ms", "join_timeout_ms"):
            if getattr(self, name) < (1 if name == "min_replicas" else 0):
                raise UserError(f"--{name.replace('_', '-')} must be positive")
        check_heartbeat_timeout(self.heartbeat_timeout_ms)

    def binary_options(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in BINARY_OPTIONS}

    def args(self) -> list[str]:
        """Arguments of `torchft_lighthouse` (its flags use underscores)."""
        out = [
            "--bind", format_bind(*parse_bind(self.bind)),
            "--min_replicas", str(self.min_replicas),
            "--quorum_tick_ms", str(self.quorum_tick_ms),
            "--join_timeout_ms", str(self.join_timeout_ms),
        ]  # fmt: skip
        if self.heartbeat_timeout_ms is not None:
            out += ["--heartbeat_timeout_ms", str(self.heartbeat_timeout_ms)]
        return out
