"""Replica-step goodput: what a run's replicas committed against what they would have.

"Steps committed" overstates what a degraded run delivers: with 2 replicas a step taken by
one trains half the tokens, yet counts as a step. Goodput counts replica-steps (each
replica's committed steps, `Report.steps`) against group size x the steps the run's wall time
would give at the failure-free rate, and splits what is lost by the failures' phases
(`Failure.detection_s`, `degraded_s`, `healing_s`).

The failure-free rate comes from the run itself unless a control run is given: steps per
second over its full-strength stretches, each measured between two quorum rounds so that no
failure's lost work is in it (docs/report.md, "Goodput"). A healed replica's first commit is
charged to healing, not counted as trained. Pure: reads the model, builds a `model.Goodput`.
"""

from __future__ import annotations

from ftslurm.report.model import Baseline, Failure, Goodput, Quorum, elapsed


def full_strength_stretches(
    quorums: list[Quorum], failures: list[Failure], group: int,
    last_time: float | None, max_step: int | None,
) -> list[tuple[float, int]]:
    """(seconds, steps) of each stretch at the group size, round to round: from the quorum's
    first round (its time and step) to its last round, whose step is the next quorum's when
    a survivor failed to commit it (the next quorum has commit failures), else the one before
    (the failure fell while the step was computing, or between steps). Without the last
    round's time (no Lighthouse log), to the first failure before the next quorum, or that
    quorum. The last quorum's stretch ends at the run's last line and last committed step.
    Round to round, so no failure's lost work and no heal is inside a stretch."""
    out: list[tuple[float, int]] = []
    for i, q in enumerate(quorums):
        if len(q.participants) < group or q.time is None:
            continue
        start, s0 = q.time, q.step
        if i + 1 < len(quorums):
            nxt = quorums[i + 1]
            if nxt.last_seen_before is not None and nxt.last_seen_before > start:
                end = nxt.last_seen_before
                s1 = nxt.step if nxt.commit_failures else nxt.step - 1
            else:
                cut = [x.time for x in failures
                       if x.time is not None and start < x.time
                       and (nxt.time is None or x.time < nxt.time)]
                end = min(cut) if cut else nxt.time
                s1 = nxt.step
        else:
            end = last_time
            s1 = max_step if max_step is not None else q.step
        if end is None or end <= start or s1 < s0:
            continue
        out.append((end - start, s1 - s0))
    return out


def self_baseline(quorums: list[Quorum], failures: list[Failure], group: int,
                  last_time: float | None, max_step: int | None) -> Baseline:
    """The run's own failure-free rate: steps over seconds of its full-strength stretches."""
    stretches = full_strength_stretches(quorums, failures, group, last_time, max_step)
    secs = sum(s for s, _ in stretches)
    steps = sum(n for _, n in stretches)
    rate = steps / secs if secs > 0 and steps > 0 else None
    return Baseline("self", rate, secs, len(stretches))


def unreadable_commits(committed: int | None, decisions: int | None,
                       advanced: int | None) -> str | None:
    """Why the logs' commits cannot be counted, or None when they can.

    Every replica logs one decision (`should_commit=True|False`) per step it takes, so a run
    that advanced N torchft steps shows about N decisions per replica. Far fewer (under half)
    means the lines are not in the logs (torchft's INFO lines filtered out, an excerpt), and
    counting them would report a trained run as 0% goodput.
    """
    if advanced is None or advanced < 2:
        return ("no replica log with a commit decision (`should_commit=`) was read"
                if committed is None else None)
    have, committed = decisions or 0, committed or 0
    if committed == 0 or have < advanced / 2:
        return (f"the replica logs hold {have} commit decision{'' if have == 1 else 's'} "
                f"({committed} committed) for the {advanced} steps the quorums advanced: "
                "torchft's `should_commit` lines are missing, so commits cannot be counted")
    return None


def measure(
    quorums: list[Quorum], failures: list[Failure], group: int, committed: int | None,
    last_time: float | None, max_step: int | None, *, heal_steps: int = 0,
    decisions: int | None = None, baseline: Baseline | None = None,
    device: str | None = None,
) -> Goodput | None:
    """The run's goodput (None without a quorum). `quorums`: the run's, in time order;
    `committed`: commit decisions that committed (None: no replica log had any);
    `decisions`: the most decisions one replica logged; `heal_steps`: heals whose target
    committed after them; `baseline`: a control run's rate (default: the run's own)."""
    if not quorums or group <= 0:
        return None
    start = next((q.time for q in quorums if q.time is not None), None)
    window = elapsed(start, last_time)
    own = self_baseline(quorums, failures, group, last_time, max_step)
    base = baseline if baseline is not None else own
    rate = base.rate
    ideal = group * rate * window if rate is not None and window else None
    first = next(q for q in quorums if q.time is not None) if start is not None else None
    advanced = max_step - first.step if first is not None and max_step is not None else None
    g = Goodput(rate, window, base.seconds, committed or 0, ideal, advanced,
                heal_steps=min(heal_steps, committed or 0), baseline=base,
                at_start=len(first.participants) if first is not None and committed else 0,
                unreadable=unreadable_commits(committed, decisions, advanced), device=device)
    if not window:
        return g
    end = last_time
    lost = {"detection": 0.0, "degraded": 0.0, "healing": 0.0}
    for f in failures:
        out = group - f.survivors if f.survivors is not None else 1
        lost["detection"] += group * (f.detection_s or 0.0)
        # a failure the logs end before healing: degraded / healing until the end of the run
        quorum_back = f.full_quorum_time if f.full_quorum_time is not None else end
        lost["degraded"] += out * (elapsed(f.detected_end, quorum_back) or 0.0)
        if f.full_quorum_time is not None:
            healed = f.full_strength_time if f.full_strength_time is not None else end
            lost["healing"] += out * (elapsed(f.full_quorum_time, healed) or 0.0)
    if rate:  # each heal's first commit: one replica's step at the failure-free rate
        lost["healing"] += g.heal_steps / rate
    g.lost_detection = min(1.0, lost["detection"] / (group * window))
    g.lost_degraded = min(1.0, lost["degraded"] / (group * window))
    g.lost_healing = min(1.0, lost["healing"] / (group * window))
    return g
