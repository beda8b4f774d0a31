"""torchft's Lighthouse as a managed daemon on the login node, and a parser of its status page.

The Python API (used by the CLI, the tests, the demo and the benchmarks):

    from ftslurm import lighthouse
    info = lighthouse.start(advertise="login-0")       # or start(LighthouseConfig(...))
    lighthouse.status().quorum                         # what its /status page says
    lighthouse.restart(lighthouse.recorded_config())   # same options, same address
    lighthouse.stop()

Modules, one job each: `address` (bind / advertised host, pure), `config` (LighthouseConfig:
every start option and its default), `command` and `launcher` (what runs torchft's
Lighthouse), `ports` (is the port free, who holds it), `status_page` (the /status HTML),
`lifecycle` (start, stop, status, restart, exec_foreground).
"""

from ftslurm.lighthouse.command import lighthouse_command
from ftslurm.lighthouse.config import LighthouseConfig
from ftslurm.lighthouse.launcher import torchft_extension
from ftslurm.lighthouse.lifecycle import (
    DEFAULT_STOP_GRACE_S,
    STALE_WHY,
    LighthouseInfo,
    LighthouseStatus,
    exec_foreground,
    log_path,
    recorded_config,
    restart,
    start,
    status,
    stop,
)
from ftslurm.lighthouse.ports import PortInUse
from ftslurm.lighthouse.status_page import QuorumPage, answers, http_get, parse_status_html

__all__ = [
    "DEFAULT_STOP_GRACE_S", "STALE_WHY", "LighthouseConfig", "LighthouseInfo", "LighthouseStatus",
    "PortInUse", "QuorumPage", "answers", "exec_foreground", "http_get", "lighthouse_command",
    "log_path", "parse_status_html", "recorded_config", "restart", "start", "status", "stop",
    "torchft_extension",
]  # fmt: skip
