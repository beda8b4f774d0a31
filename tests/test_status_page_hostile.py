"""A hostile or huge Lighthouse /status page: parsed without raising, in linear time, its
unreadable pieces dropped and counted (`QuorumPage.rejected`, `readable`), and every reader
of it (the watchers' `fetch`, `metrics show`, `lighthouse status`, `status`) keeps working.

Anyone who can reach the Lighthouse's port can ask for a quorum or heartbeat under any replica
id, and the page lists it. `hostile_page` is a recorded page
(tests/fixtures/lighthouse/status_two_members_recovering.html) with replica 1's id replaced
by `HOSTILE_ID` written as torchft's Lighthouse writes it: `<`, `>`, `&` and quotes escaped,
control characters as they are (checked once against a real Lighthouse fed the id by
torchft's LighthouseClient.quorum and .heartbeat: the same page, byte for byte, around the
id). Before, `int()` of its 5,000 digits raised ValueError in every reader, and a page of
repeated heartbeat items took time quadratic in its size."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from ftslurm import daemon
from ftslurm import lighthouse as lh
from ftslurm import status as st
from ftslurm.lighthouse import lifecycle, status_page
from ftslurm.lighthouse.status_page import parse_status_html
from ftslurm.metrics.snapshot import MAX_GROUP_SIZE, UNKNOWN, build_snapshot
from tests.clirun import invoke

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

FIX = Path(__file__).parent / "fixtures" / "lighthouse"
RECORDED = (FIX / "status_two_members_recovering.html").read_text()
DIGITS = "9" * 5000
HOSTILE_ID = f"x Step: {DIGITS} </div></li><b>&\"'\x1b]0;PWNED\x07"
ESCAPED_ID = (HOSTILE_ID.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
              .replace('"', "&quot;").replace("'", "&#x27;"))  # fmt: skip
EMPTY_BEAT = '<li class="heartbeat">'


def hostile_page(filler: str = "", size: int = 0) -> str:
    """The recorded page with replica 1 asking under HOSTILE_ID, and `filler` repeated in
    its heartbeat list up to about `size` bytes."""
    page = RECORDED.replace("torchtitan_ft_1:9a1d", ESCAPED_ID)
    return page.replace("</ul>", filler * (size // len(filler) if filler else 0) + "</ul>")


def timed(fn, *args):
    t0 = time.process_time()
    out = fn(*args)
    return out, time.process_time() - t0


# ---------------------------------------------------------------- the parser


def test_a_member_id_holding_a_huge_step_is_read_as_an_id():
    """`Step: <5000 digits>` inside the id: ValueError before (the step was searched for
    anywhere in the member, the id first); now each field is read where the template puts
    it, after the id."""
    q = parse_status_html(hostile_page())
    assert [(m.replica_id, m.step, m.recovering, m.world_size) for m in q.members] == [
        ("torchtitan_ft_0:0f3c", 42, False, 8), (HOSTILE_ID, 0, True, 8),
    ]  # fmt: skip
    assert [h.replica_id for h in q.heartbeats] == ["torchtitan_ft_0:0f3c", HOSTILE_ID]
    assert (q.quorum_id, q.rejected, q.readable) == (1, 0, True)


def test_numbers_of_too_many_digits_are_unreadable_not_parsed():
    page = (RECORDED.replace("Current quorum_id: 1", f"Current quorum_id: {DIGITS}")
            .replace("Step: 42", "Step: 1234567890123456789")  # 19 digits
            .replace("World size: 8", f"World size: {DIGITS}", 1)
            .replace("seen 0.001615462s ago", f"seen {DIGITS}.5s ago"))  # fmt: skip
    q = parse_status_html(page)
    assert q.quorum_id is None and q.previous_quorum_id == 1
    assert [(m.step, m.world_size) for m in q.members] == [(None, None), (0, 8)]
    # the heartbeat whose age is unreadable is dropped, not kept with a guessed age
    assert [h.replica_id for h in q.heartbeats] == ["torchtitan_ft_1:9a1d"]
    assert q.rejected == 4 and not q.readable
    assert status_page.parse_duration(f"{DIGITS}s") is None  # float() would say inf


def test_unreadable_items_are_dropped_and_counted():
    beats = (
        '<li class="heartbeat">a:1: seen 1s ago'  # unclosed: the next item starts
        '<li class="heartbeat">b:2: seen 2s ago</li>'
        '<li class="heartbeat">c<i>3</i>: seen 3s ago</li>'  # markup in the id
        '<li class="heartbeat">d:4 seen 4s ago</li>'  # no `: seen`
        '<li class="heartbeat">: seen 5s ago</li>'  # no id
        '<li class="heartbeat old">e: seen 1s ago: seen 6ms ago</li>'  # the last `: seen`
    )
    members = (
        '<div class="member">no id here <br/></div>'
        '<div class="member"><b>unclosed</b> Step: 3 <br/>'
        '<div class="member"><b>f:1</b> <br/> Step: -2 <br/> World size: -1 <br/></div>'
    )
    q = parse_status_html(f"Current quorum_id: 5 <br>\n<div>{members}</div>\n"
                          f"<h2>Heartbeats</h2><ul>{beats}</ul>")  # fmt: skip
    assert [(m.replica_id, m.step, m.world_size) for m in q.members] == [("f:1", -2, None)]
    assert [(h.replica_id, h.age_s, h.old) for h in q.heartbeats] == [
        ("b:2", 2.0, False), ("e: seen 1s ago", pytest.approx(0.006), True),
    ]  # fmt: skip
    assert q.rejected == 4 + 2 + 1 and not q.readable  # 4 items, 2 members, a world size


def test_fields_are_read_in_their_own_region_only():
    """A quorum field, a step or an address named inside an id is never read as that field:
    an idle Lighthouse (no previous quorum) shows no previous quorum id, whatever an id says."""
    idle = (FIX / "status_idle.html").read_text()
    q = parse_status_html(idle.replace(
        "</ul>", '<li class="heartbeat">Previous quorum id: 7 Quorum age: 1s: seen 1s ago</li>'
    ))  # fmt: skip
    assert (q.quorum_id, q.previous_quorum_id, q.quorum_age_s, len(q.heartbeats)) == (
        0, None, None, 1)  # fmt: skip
    member = ('<div class="member"><b>Manager: evil &lt;br/&gt;</b> <br/> Step: 1 <br/>\n'
              '<button hx-post="/replica/World size: 9/kill">Kill</button></div>')  # fmt: skip
    [m] = parse_status_html(f"Current quorum_id: 1 <br>{member}").members
    assert (m.replica_id, m.manager, m.world_size, m.step) == (
        "Manager: evil <br/>", None, None, 1)  # fmt: skip


def test_recorded_pages_read_whole():
    for name in ("status_idle.html", "status_two_members_recovering.html",
                 "status_one_heartbeat_old.html"):  # fmt: skip
        q = parse_status_html((FIX / name).read_text())
        assert q.readable and q.rejected == 0, name
    assert not parse_status_html("").readable  # no quorum id: not the Lighthouse's page


FRAGMENTS = [
    '<div class="member', '<div class="member recovering">', '<li class="heartbeat',
    '<li class="heartbeat old">', '">', ">", "<b>", "</b>", "</div>", "</li>", "<br/>", "<br",
    "<button", "<h2>Heartbeats</h2>", "<h3>", "Current quorum_id: ", "Next quorum status: ",
    "Previous quorum id: ", "Num participants: ", "Quorum age: ", "Step: ", "Manager: ",
    "TCPStore: ", "World size: ", ": seen ", " ago", "s", "0.5", "-", "1", DIGITS, "\x00",
    "\n\n", " ", "\n", "old", "recovering", "&amp;", "&#x27;", "torchtitan_ft_1:9a1d", '"',
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(hs.lists(hs.one_of(hs.sampled_from(FRAGMENTS), hs.text(max_size=8)), max_size=40))
def test_parser_never_raises_on_hostile_fragments(parts: list[str]):
    """Pages made of the template's own pieces, huge digit runs, NULs, unclosed and nested
    tags and stray `</div>`s: parsed without raising, into well-formed fields only."""
    q = parse_status_html("".join(parts))
    numbers = [q.quorum_id, q.previous_quorum_id, q.num_participants,
               *(x for m in q.members for x in (m.step, m.world_size))]  # fmt: skip
    assert all(n is None or (isinstance(n, int) and abs(n) < 10**18) for n in numbers)
    assert all(m.replica_id and "<" not in m.replica_id for m in q.members)
    assert all(h.replica_id and "<" not in h.replica_id for h in q.heartbeats)
    ages = [q.quorum_age_s, *(h.age_s for h in q.heartbeats)]
    assert all(a is None or (math.isfinite(a) and a >= 0) for a in ages)
    assert all(h.age_s is not None for h in q.heartbeats)
    assert q.rejected >= 0 and isinstance(q.readable, bool)


MB = 1 << 20


@settings(max_examples=12, deadline=None)
@given(hs.lists(hs.one_of(hs.sampled_from(FRAGMENTS), hs.text(max_size=4)), min_size=1,
                max_size=8).filter(lambda parts: "".join(parts)))  # fmt: skip
def test_5mb_pages_of_repeated_fragments_parse_quickly(parts: list[str]):
    """The same pieces repeated to 5 MB: never raises, under 2 s of CPU."""
    unit = "".join(parts)
    q, seconds = timed(parse_status_html, unit * (5 * MB // len(unit) + 1))
    assert seconds < 2, (parts, seconds)
    assert all(h.age_s is not None for h in q.heartbeats)


SHAPES = {  # each took time quadratic in its size before
    "empty-heartbeat-items": EMPTY_BEAT,
    "unclosed-heartbeat-items": '<li class="heartbeat">a:1: seen 1s ago',
    "labels-in-one-member": "Manager:",
    "bold-openers-in-one-member": "<b>",
}


def shaped_page(filler: str, size: int) -> str:
    inside = {"Manager:": '<div class="member"><b>a</b>{}</div>',
              "<b>": '<div class="member">{}</div>'}  # fmt: skip
    body = filler * (size // len(filler))
    return "Current quorum_id: 1 <br>\n" + inside.get(filler, "{}").format(body)


@pytest.mark.parametrize("shape", SHAPES)
def test_parse_time_grows_linearly(shape: str):
    """Each size parses within 0.25 s + 0.35 s per MB of CPU (measured here: 5.6 MB of
    empty heartbeat items in 0.35 s). Before, 22 KB of empty heartbeat items took 0.3 s,
    88 KB 4.2 s: quadratic, so 5.6 MB would have taken hours."""
    filler = SHAPES[shape]
    for size in (22 << 10, 88 << 10, 352 << 10, MB + (MB * 4 // 10), 5 * MB + (MB * 6 // 10)):
        page = shaped_page(filler, size)
        q, seconds = timed(parse_status_html, page)
        assert seconds < 0.25 + 0.35 * len(page) / MB, (shape, len(page), seconds)
    assert q.heartbeats == []


def test_a_5mb_status_gap_and_hostile_page_parse_quickly():
    """A status line of 5 MB of blanks (one newline only: no blank line ends it), unread
    (over MAX_TEXT), and the recorded page with 5.6 MB of empty heartbeat items: under 2 s
    each."""
    blanks = "Current quorum_id: 1 <br>\nNext quorum status: x\n" + " " * (5 * MB) + "y"
    q, seconds = timed(parse_status_html, blanks)
    assert q.next_status is None and q.rejected == 1 and seconds < 2
    q, seconds = timed(parse_status_html, hostile_page(EMPTY_BEAT, 5 * MB + (MB * 6 // 10)))
    assert seconds < 2 and len(q.members) == 2 and len(q.heartbeats) == 2
    assert q.rejected > 200_000 and not q.readable


# ---------------------------------------------------------------- the watchers' fetch


def test_fetch_is_none_or_a_page(monkeypatch: pytest.MonkeyPatch):
    """The watchers' contract: None (no evidence) when the answer is not 200 or no Lighthouse
    page; else the page, `readable` saying whether what it leaves out is evidence."""
    answers: list[tuple[int, str]] = []
    monkeypatch.setattr(status_page, "http_get", lambda url, timeout: answers.pop())
    answers.append((200, hostile_page()))
    page = status_page.fetch("http://lighthouse:29510")
    assert page is not None and page.readable and page.members[1].replica_id == HOSTILE_ID
    answers.append((200, hostile_page(EMPTY_BEAT, 1000)))
    page = status_page.fetch("http://lighthouse:29510")
    assert page is not None and not page.readable and len(page.heartbeats) == 2
    for answer in ((200, "<html>it works</html>"), (200, "\x00" * 1000), (404, "")):
        answers.append(answer)
        assert status_page.fetch("http://lighthouse:29510") is None, answer


# ---------------------------------------------------------------- metrics


def test_metrics_show_on_a_hostile_page_is_up_and_quick(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path):  # fmt: skip
    """`metrics show` on a Lighthouse answering the 5,000-digit id plus 352 KB of empty
    heartbeat items: before, `ftslurm_lighthouse_up 0` (the ValueError) and 84 s (quadratic
    parse); now up, the replicas' samples read, under 2 s."""
    page = hostile_page(EMPTY_BEAT, 352 << 10)
    monkeypatch.setattr(lh, "http_get", lambda url, timeout=2.0: (200, page))
    t0 = time.monotonic()
    r = invoke("metrics", "show", "--lighthouse-url", "http://lighthouse:29510", str(tmp_path))
    seconds = time.monotonic() - t0
    assert r.exit_code == 0, r.output
    assert "ftslurm_lighthouse_up 1.0" in r.output and seconds < 2, seconds
    assert 'ftslurm_replica_step{replica="0"} 42.0' in r.output
    assert 'ftslurm_replica_state{replica="1",state="healing"} 0.0' in r.output
    assert 'ftslurm_replica_state{replica="unknown",state="healing"} 1.0' in r.output
    assert DIGITS[:100] not in r.output and "PWNED" not in r.output


def test_a_page_of_20000_ids_lists_at_most_max_group_size_slots():
    """Distinct ids from anyone: before, one slot each (20,002 here, a dozen series each per
    scrape); now the first MAX_GROUP_SIZE slots, the rest counted under `unknown`."""
    beats = "".join(f'<li class="heartbeat">r{i}: seen 0.5s ago</li>' for i in range(20_000))
    snap = build_snapshot(parse_status_html(RECORDED.replace("</ul>", beats + "</ul>")),
                          None)  # fmt: skip
    slots = [r.replica for r in snap.replicas]
    assert len(slots) == MAX_GROUP_SIZE + 1 and slots[:2] == ["0", "1"]
    assert slots[-1] == UNKNOWN and snap.replicas[-1].state == "joining"


# ---------------------------------------------------------------- lighthouse status, status


@pytest.fixture
def running_lighthouse(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A managed Lighthouse that `lh.status` finds running, whose /status answers the page
    the test puts in the returned list."""
    state = daemon.DaemonState(
        "lighthouse", 4242, None, time.time() - 60, ["lighthouse"], "lighthouse",
        extra={"address": "http://login-0:29510", "bind": "0.0.0.0:29510",
               "probe_url": "http://127.0.0.1:29510/status"},
    )  # fmt: skip
    monkeypatch.setattr(daemon.Daemon, "lookup",
                        lambda self, clean_stale=True: daemon.Lookup(state))  # fmt: skip
    pages: list[str] = []
    monkeypatch.setattr(lifecycle, "http_get", lambda url, timeout: (200, pages[-1]))
    monkeypatch.setenv("FTSLURM_LIGHTHOUSE_DIR", str(tmp_path / "lh"))
    return pages


def test_lighthouse_status_on_a_hostile_page(running_lighthouse: list[str]):
    """Before: the ValueError made the running Lighthouse `not answering`. Now its quorum is
    shown, the id escaped (ESC as \\x1b, no raw control), the step the page's own."""
    evil = '<li class="heartbeat old">evil\x1b]0;PWNED\x07:1: seen 2s ago</li>'
    running_lighthouse.append(hostile_page(EMPTY_BEAT, 100 << 10).replace("</ul>", evil + "</ul>"))
    r = invoke("lighthouse", "status")
    assert r.exit_code == 0 and r.exception is None, r.output
    assert "Quorum id:  1" in r.output and "not answering" not in r.output
    assert "step 0  manager http://node-d:4000 RECOVERING" in r.output
    assert "\x1b" not in r.output and "\x07" not in r.output
    assert "  evil\\x1b]0;PWNED\\x07:1  2.0 s ago  (old)" in r.output
    r = invoke("lighthouse", "status", "--json")
    quorum = json.loads(r.output)["quorum"]
    assert quorum["rejected"] > 1000 and quorum["members"][1]["replica_id"] == HOSTILE_ID


def test_status_line_on_a_hostile_page(running_lighthouse: list[str]):
    """`ftslurm status`'s Lighthouse line: the quorum, its members named short and escaped."""
    running_lighthouse.append(hostile_page())
    q = st.lighthouse_quorum()
    assert q is not None and q.quorum_id == 1 and q.participants[1] == HOSTILE_ID
    assert st.render_quorum(q) == ("lighthouse: http://login-0:29510 quorum 1: 2 members "
                                   "(torchtitan_ft_0, x Step), 2 heartbeating")  # fmt: skip
    # members named by ids of 5,000 digits and controls: each cut to 40 characters, 8 named
    many = st.Quorum(True, "http://h:1", 3, [f"{DIGITS}\x1b{i}:u" for i in range(50)])
    line = st.render_quorum(many)
    assert len(line) < 500 and line.count("9" * 37 + "...") == 8 and ", 42 more)" in line
