"""lifecycle.decide as a table: every way a training run ends, the action, the exit code, and
which costly facts were asked for (the failure history records a failure and may take the
node out; the node's state is a call to sinfo)."""

from __future__ import annotations

import pytest

from ftslurm.replica import exits, handoff
from ftslurm.replica.launcher.lifecycle import (
    FINISHED_AT_THE_LIMIT,
    Act,
    Ended,
    InPlace,
    Verdict,
    decide,
)

pytestmark = pytest.mark.unit

CRASH = Verdict(True, "training exited with code 1")
CAPPED = Verdict(False, "rate rule: 5 failures within FT_FAIL_WINDOW_MIN=30 minutes ...")
DONE = Verdict(False, "training finished")
BAD_NODE = Verdict(True, "training exited with code 1", ("worker-1",))


def place(state: str | None = "idle", usable: bool = True, *, stop: bool = False,
          early: bool = False, used: int = 0, cap: int = 1) -> InPlace:  # fmt: skip
    return InPlace(stop, early, used, cap, "worker-1", lambda: (state, usable))


class Asked:
    """The costly facts decide asked for."""

    def __init__(self, verdict: Verdict, where: InPlace) -> None:
        self._verdict, self._where = verdict, where
        self.asked: list[str] = []

    def verdict(self) -> Verdict:
        self.asked.append("history")
        return self._verdict

    def in_place(self) -> InPlace:
        self.asked.append("in place")
        return self._where


# (case, Ended, verdict, in a job array, InPlace, action, exit code, asked, note's start)
ROWS = [
    ("time limit, final checkpoint before STEPS", Ended(0, time_limit=True, stopped_early=True),
     CRASH, True, place(), Act.REQUEUE_AT_TIME_LIMIT, exits.TIME_LIMIT, [], ""),
    # the end-of-training race: the signal came during the last step, nothing to resume
    ("time limit during the last step", Ended(0, time_limit=True), DONE, True, place(),
     Act.FINISH, 0, ["history"], FINISHED_AT_THE_LIMIT),
    ("time limit, then cancelled", Ended(0, cancelled=True, time_limit=True, stopped_early=True),
     DONE, True, place(), Act.FINISH, 0, ["history"], ""),
    ("finished", Ended(0), DONE, True, place(), Act.FINISH, 0, ["history"], ""),
    ("fenced by a newer claim", Ended(exits.FENCED, fenced=True), CRASH, True, place(),
     Act.BECOME_SPARE, exits.FENCED, [], ""),
    ("fenced, then cancelled", Ended(143, cancelled=True, fenced=True),
     Verdict(False, "stopped by a signal"), True, place(), Act.STOP, 143, ["history"], ""),
    ("classic job crashed", Ended(1, ft=False), CRASH, True, place(), Act.STOP, 1, [], ""),
    ("classic job refused", Ended(1, ft=False, refused="bad flag"), CRASH, True, place(),
     Act.STOP, exits.CONFIG_ERROR, [], ""),
    ("torchtitan refused its options", Ended(1, refused="bad flag"),
     Verdict(False, "torchtitan refused its options"), True, place(), Act.STOP,
     exits.CONFIG_ERROR, ["history"], ""),
    ("a crash loop (rate cap)", Ended(1), CAPPED, True, place(), Act.STOP, 1, ["history"], ""),
    ("a crash outside a job array", Ended(1), CRASH, False, place(), Act.STOP, 1, ["history"],
     ""),
    ("a crash on a usable node", Ended(137), CRASH, True, place(), Act.RESTART_IN_PLACE,
     exits.RESTART_IN_PLACE, ["history", "in place"], ""),
    ("a crash, restarts in place off", Ended(137), CRASH, True, place(cap=0), Act.REQUEUE, 137,
     ["history", "in place"], ""),
    ("a crash, restarts used up", Ended(137), CRASH, True, place(used=1), Act.REQUEUE, 137,
     ["history", "in place"], "restarts in place used up (1 of FT_MAX_RESTARTS=1)"),
    ("a crash on a draining node", Ended(137), CRASH, True, place("draining", False),
     Act.REQUEUE, 137, ["history", "in place"], "not restarting in place: node worker-1 is "
     "draining"),
    ("a crash on a node sinfo does not know", Ended(137), CRASH, True, place(None, False),
     Act.REQUEUE, 137, ["history", "in place"], "not restarting in place: node worker-1 is "
     "unknown to sinfo"),
    ("a crash after the time-limit signal", Ended(137), CRASH, True, place(early=True),
     Act.REQUEUE, 137, ["history", "in place"], "not restarting in place: Slurm's time-limit"),
    ("a crash after a stop signal", Ended(137), CRASH, True, place(stop=True), Act.REQUEUE, 137,
     ["history", "in place"], ""),
    ("a crash on a node taken out", Ended(1), BAD_NODE, True, place(), Act.REQUEUE, 1,
     ["history"], ""),
    ("a failed pre-flight check", Ended(exits.PREFLIGHT, preflight="gpu check failed"), CRASH,
     True, place(), Act.REQUEUE, exits.PREFLIGHT, ["history"], ""),
]  # fmt: skip


@pytest.mark.parametrize(("case", "ended", "verdict", "in_array", "where", "act", "code",
                          "asked", "note"), ROWS, ids=[r[0] for r in ROWS])  # fmt: skip
def test_decide(case: str, ended: Ended, verdict: Verdict, in_array: bool, where: InPlace,
                act: Act, code: int, asked: list[str], note: str) -> None:  # fmt: skip
    facts = Asked(verdict, where)
    action = decide(ended, facts.verdict, in_array, facts.in_place)
    assert (action.act, action.exit_code, facts.asked) == (act, code, asked), case
    assert action.note.startswith(note) and bool(action.note) == bool(note), action.note


def test_the_sinfo_query_comes_last_and_only_when_needed() -> None:
    """The node's state is asked only when nothing else rules a restart in place out."""
    queried: list[str] = []

    def state() -> tuple[str | None, bool]:
        queried.append("sinfo")
        return "mixed", True

    for where, want in ((InPlace(True, False, 0, 1, "n", state), []),
                        (InPlace(False, False, 0, 0, "n", state), []),
                        (InPlace(False, True, 0, 1, "n", state), []),
                        (InPlace(False, False, 1, 1, "n", state), []),
                        (InPlace(False, False, 0, 1, "n", state), ["sinfo"])):  # fmt: skip
        queried.clear()
        decide(Ended(1), lambda: CRASH, True, lambda w=where: w)  # type: ignore[misc]
        assert queried == want, where


def test_a_restart_in_place_carries_what_its_log_line_says() -> None:
    action = decide(Ended(137), lambda: CRASH, True, lambda: place("mixed", used=0, cap=2))
    assert action.act is Act.RESTART_IN_PLACE and action.state == "mixed"
    assert action.where is not None and (action.where.used, action.where.cap) == (0, 2)
    assert action.why == CRASH.why


def test_a_requeue_carries_the_nodes_to_avoid() -> None:
    action = decide(Ended(1), lambda: BAD_NODE, True, lambda: place())
    assert action.act is Act.REQUEUE and action.avoid == ("worker-1",)
    outside = decide(Ended(1), lambda: CRASH, False, lambda: place())
    assert outside.outside_array and outside.why == CRASH.why


def test_the_notes_of_a_run_say_how_it_ended(tmp_path) -> None:
    """The files a run leaves (the launcher's time-limit file, the worker's note beside it,
    the fenced note) are read in one place into what decide weighs."""
    from ftslurm.replica.launcher.lifecycle import Notes, Signals

    notes = Notes(tmp_path)
    assert notes.ended(0, True, False, None) == Ended(0)
    notes.time_limit.touch()
    assert notes.ended(0, True, False, None) == Ended(0, time_limit=True)
    handoff.stopped_early_note(notes.time_limit).touch()
    notes.fenced.touch()
    got = notes.ended(1, False, True, "bad flag")
    assert got == Ended(1, ft=False, cancelled=True, time_limit=True, stopped_early=True,
                        fenced=True, refused="bad flag")  # fmt: skip
    signals = Signals()
    assert signals.stopped is None
    signals.stop(15)
    signals.stop(2)
    signals.time_limit = True
    assert signals.stopped == 15
    signals.clear()
    assert (signals.stopped, signals.time_limit) == (None, False)
