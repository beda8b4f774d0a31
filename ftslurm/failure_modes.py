"""The failure modes `ftslurm simulate-failure` injects and the report knows: one record each.

Why a registry: a mode's facts (does it stop processes silently, is it held and undone, which
processes it signals, who acts first) were a name compared in six modules, so a new mode was
half supported wherever one comparison was missed. Each is read from here; what a mode *does*
(its actions) is built in failure_plan.make_plan and carried out in failure.py. Standard
library only: logvocab (the event log's vocabulary) takes its names from here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FailureMode:
    name: str
    # the processes stop and nothing closes a socket (a hang, a stall, a frozen node): only a
    # detector notices, not the operating system
    silent: bool
    # held for --down-for, then undone (RESUME, SIGCONT, the stall let go)
    timed: bool
    # which processes it signals: "workers" (the replica's training workers), "main-threads"
    # (their main threads, by ptrace), "node" (every process of the node), "" (Slurm acts)
    signals: str
    # the replica's launcher outlives it and acts first (a restart in place), not Slurm
    launcher_acts: bool
    # the chaos log's words for a held event, after the mode and its target (`{s}`: seconds)
    held: str = ""


MODES: dict[str, FailureMode] = {m.name: m for m in (
    FailureMode("node-down", silent=False, timed=True, signals="", launcher_acts=False,
                held=", {s} s down, resumed"),
    FailureMode("kill", silent=False, timed=False, signals="workers", launcher_acts=True),
    FailureMode("requeue", silent=False, timed=False, signals="", launcher_acts=False),
    FailureMode("hang", silent=True, timed=True, signals="workers", launcher_acts=True,
                held=", {s} s stopped, continued"),
    FailureMode("stall", silent=True, timed=True, signals="main-threads", launcher_acts=True,
                held=", {s} s stalled (main threads), let go"),
    FailureMode("freeze-node", silent=True, timed=True, signals="node", launcher_acts=False,
                held=", {s} s frozen, continued"),
)}  # fmt: skip
NAMES = tuple(MODES)
# loud: the processes die and their sockets close; silent: they stop, nothing closes (a stall
# stops only the training thread: the worker's other threads, its heartbeat's too, run on)
SILENT = tuple(n for n, m in MODES.items() if m.silent)
TIMED = tuple(n for n, m in MODES.items() if m.timed)
