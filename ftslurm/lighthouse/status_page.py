"""The Lighthouse's HTTP /status page: a pure, lenient parser of its HTML, and its fetch.

There is no JSON endpoint: the quorum as `ftslurm lighthouse status` shows it comes from
this fragment. Tests run the parser on pages recorded from the real Lighthouse
(tests/fixtures/lighthouse).

Why a forward scan and not regexes over the whole page: the page holds what the network
sent. Anyone who can reach the Lighthouse can heartbeat or ask for a quorum under any replica
id, and the page lists it; whatever else answers on the port may send anything up to
`MAX_ANSWER`. So the page is read in one pass (each item ends where the next one starts,
each search stays inside its item: time grows linearly with the page), a number is read
only from at most `MAX_DIGITS` digits, and each field is read where the Lighthouse's template
puts it, never out of a replica id. What cannot be read is left out and counted
(`QuorumPage.rejected`), never guessed.
"""

from __future__ import annotations

import errno
import html
import http.client
import re
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from ftslurm.knobs import TORCHFT_HEARTBEAT_INTERVAL_MS
from ftslurm.logvocab import split_replica_id

# the page's types are the run model's quorum types (ftslurm/run/quorum.py); the names stay here
from ftslurm.run.quorum import Heartbeat as Heartbeat
from ftslurm.run.quorum import PageMember as Member
from ftslurm.run.quorum import QuorumPage as QuorumPage

_DURATION_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9, "m": 60.0}
MAX_DIGITS = 18  # a number of more digits is unreadable (torchft's steps, ids, sizes fit)
MAX_TEXT = 1024  # a status line or address longer than this is unreadable
# bounded digits: a 5,000-digit age is no age (float() would read it as inf)
_DURATION = re.compile(r"\s*([0-9]{1,18}(?:\.[0-9]{1,40})?)\s*(s|ms|µs|us|ns|m)\s*")
# each matched right after its label: one scan of the text that follows, never a search
_NUMBER = re.compile(r"\s*(-?)([0-9]+)")
_WORD = re.compile(r"\s*(\S+?)\s*<br")  # Manager's and TCPStore's value
_TOKEN = re.compile(r"\s*([^<\s]+)")  # Quorum age's value
_STATUS_END = re.compile(r"<br\s*/?>|<h[0-9]|\n\s*\n")
_MEMBER = '<div class="member'
_BEAT = '<li class="heartbeat'


def parse_duration(text: str) -> float | None:
    """`0.084761762s` (what the page shows), also `84.7ms` etc. (Rust's Debug form) -> s;
    None for anything else (more than `MAX_DIGITS` whole digits too)."""
    m = _DURATION.fullmatch(text)
    if not m:
        return None
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


def parse_status_html(page: str) -> QuorumPage:
    """Parse the /status fragment. Pure and lenient: never raises, on any text, in time
    linear in its length. A missing piece is None / empty (formats drift between nightlies).

    A piece that is there but unreadable is left out and counted in `rejected`: a number of
    more than `MAX_DIGITS` digits (None), a member or heartbeat item that is unclosed, holds
    markup, lacks its replica id, or (a heartbeat) whose age is not a duration (the item is
    dropped, not guessed). `QuorumPage.readable` is the page's verdict: False for a page
    with no quorum id (not the Lighthouse's) or with anything rejected; such a page is no
    evidence that a replica is missing from it.

    The page's parts are read in their own region: the quorum fields before the first
    member, the members before the heartbeats, the member fields between its `</b>` and its
    Kill button. The Lighthouse escapes `<`, `>`, `&` and quotes in a replica id, so an id
    cannot open or close an item, and a `Step:` inside an id is never read as the step."""
    r = _Reader(page)
    beats_at = min(_find(page, _BEAT), _find(page, "<h2>Heartbeats"))
    members_at = _find(page, _MEMBER, 0, beats_at)
    head = min(members_at, beats_at)
    q = QuorumPage()
    q.quorum_id = r.number("Current quorum_id:", 0, head)
    q.next_status = r.status_line(0, head)
    q.previous_quorum_id = r.number("Previous quorum id:", 0, head)
    q.num_participants = r.number("Num participants:", 0, head)
    q.quorum_age_s = r.age(0, head)
    for start, end in _items(page, _MEMBER, members_at, beats_at):
        member = r.member(start, end)
        if member is not None:
            q.members.append(member)
    for start, end in _items(page, _BEAT, beats_at, len(page)):
        beat = r.heartbeat(start, end)
        if beat is not None:
            q.heartbeats.append(beat)
    q.rejected = r.rejected
    return q


def _find(page: str, text: str, start: int = 0, end: int | None = None) -> int:
    """Where `text` first is in page[start:end]; `end` (len(page)) when it is not."""
    end = len(page) if end is None else end
    at = page.find(text, start, end)
    return end if at < 0 else at


def _items(page: str, opener: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """(after the opener, the next opener or `end`) of each `opener` in page[start:end]:
    each character is scanned once, however the items are (un)closed."""
    at = page.find(opener, start, end)
    while at >= 0:
        after = at + len(opener)
        nxt = page.find(opener, after, end)
        yield after, end if nxt < 0 else nxt
        at = nxt


def _heartbeat_text(text: str) -> tuple[str, str] | None:
    """`<id>: seen <age> ago` -> (id, age): the id is everything before the last `: seen`
    (an id may hold `: `, spaces, anything but markup)."""
    parts = text.rsplit(None, 2)
    if len(parts) != 3 or parts[2] != "ago":
        return None
    head = parts[0].rsplit(None, 1)
    if len(head) != 2 or head[1] != "seen" or not head[0].endswith(":"):
        return None
    return head[0][:-1], parts[1]


class _Reader:
    """One pass over one page: its fields, and how many it found but could not read."""

    def __init__(self, page: str) -> None:
        self.page = page
        self.rejected = 0

    def _reject(self) -> None:
        self.rejected += 1

    def number(self, label: str, start: int, end: int, signed: bool = False) -> int | None:
        """The integer right after the first `label` in page[start:end]; None when there is
        no such label, or (counted) when no integer of at most MAX_DIGITS digits follows."""
        at = self.page.find(label, start, end)
        if at < 0:
            return None
        m = _NUMBER.match(self.page, at + len(label), end)
        if m is None or len(m.group(2)) > MAX_DIGITS or (m.group(1) and not signed):
            self._reject()
            return None
        return int(m.group(1) + m.group(2))

    def word(self, label: str, start: int, end: int) -> str | None:
        """The word between `label` and the next `<br` in page[start:end] (an address)."""
        at = self.page.find(label, start, end)
        if at < 0:
            return None
        m = _WORD.match(self.page, at + len(label), end)
        if m is None or len(m.group(1)) > MAX_TEXT:
            self._reject()
            return None
        return html.unescape(m.group(1))

    def status_line(self, start: int, end: int) -> str | None:
        """`Next quorum status:`'s text, up to the next `<br>`, heading or blank line."""
        page, label = self.page, "Next quorum status:"
        at = page.find(label, start, end)
        if at < 0:
            return None
        m = _STATUS_END.search(page, at + len(label), end)
        text = page[at + len(label) : m.start() if m else end].strip()
        if len(text) > MAX_TEXT:
            self._reject()
            return None
        return html.unescape(text)

    def age(self, start: int, end: int) -> float | None:
        """`Quorum age:`'s duration."""
        at = self.page.find("Quorum age:", start, end)
        if at < 0:
            return None
        m = _TOKEN.match(self.page, at + len("Quorum age:"), end)
        seconds = parse_duration(m.group(1)) if m and len(m.group(1)) <= MAX_TEXT else None
        if seconds is None:
            self._reject()
        return seconds

    def member(self, start: int, end: int) -> Member | None:
        """One `<div class="member ...">` item (page[start:end], after its opener)."""
        page = self.page
        gt = page.find(">", start, end)
        close = page.find("</div>", gt + 1, end) if gt >= 0 else -1
        b = page.find("<b>", gt + 1, close) if close >= 0 else -1
        eb = page.find("</b>", b + 3, close) if b >= 0 else -1
        classes = page[start:gt] if gt >= 0 else ""
        rid = html.unescape(page[b + 3 : eb].strip()) if eb >= 0 else ""
        if not rid or "<" in page[b + 3 : eb] or "<" in classes or not classes.endswith('"'):
            self._reject()  # unclosed, no id, or markup where the template puts none
            return None
        fields, fields_end = eb + 4, _find(page, "<button", eb + 4, close)
        return Member(
            replica_id=rid,
            step=self.number("Step:", fields, fields_end, signed=True),
            manager=self.word("Manager:", fields, fields_end),
            store=self.word("TCPStore:", fields, fields_end),
            world_size=self.number("World size:", fields, fields_end),
            recovering="recovering" in classes[:-1].split(),
        )

    def heartbeat(self, start: int, end: int) -> Heartbeat | None:
        """One `<li class="heartbeat ...">` item (page[start:end], after its opener); None
        (counted) unless its id and age both read."""
        page = self.page
        quote = page.find('"', start, end)
        opened = quote >= 0 and page.startswith('">', quote) and "<" not in page[start:quote]
        close = page.find("</li>", quote + 2, end) if opened else -1
        text = page[quote + 2 : close] if close >= 0 else "<"
        parsed = None if "<" in text else _heartbeat_text(text.strip())
        rid = html.unescape(parsed[0].strip()) if parsed else ""
        age = parse_duration(parsed[1]) if parsed else None
        if not rid or age is None:
            self._reject()
            return None
        return Heartbeat(replica_id=rid, age_s=age, old="old" in page[start:quote].split())


MAX_ANSWER = 16 << 20  # a /status page of 10,000 replicas is about 5 MiB
_PIECE = 1 << 16
# A person's read of the page (`lighthouse status`, `status`, `metrics`): torchft's Lighthouse
# renders it (every member and heartbeat: 0.5 MB at 1,024 replicas) behind its quorum lock,
# which took 2.4-3.1 s at 1,024 simulated replicas on a loaded login node, past the 2 s that
# bounded the whole read: a running Lighthouse showed as down.
PAGE_ANSWER_S = 10.0
PAGE_PER_MB_S = 2.0


@dataclass(frozen=True)
class Deadline:
    """How long a GET may take: `connect_s` to connect (a Lighthouse that is gone is refused
    at once, an unreachable host takes this long), then `answer_s` for the answer to come
    whole, plus `per_mb_s` for each MB (10^6 bytes) it has sent so far."""

    connect_s: float
    answer_s: float
    per_mb_s: float = 0.0

    def answer_by(self, start: float, received: int) -> float:
        return start + self.answer_s + self.per_mb_s * received / 1e6


def page_deadline(connect_s: float) -> Deadline:
    """The deadline of a person's read of /status: a short connect, a page's time to come."""
    return Deadline(connect_s, PAGE_ANSWER_S, PAGE_PER_MB_S)


class CutAnswer(OSError):
    """An answer that began (`code`) but did not come whole: over its size cap, or past its
    deadline. `head` is what came: the start of a Lighthouse page still says it answered."""

    def __init__(self, err: int, why: str, code: int, head: bytes) -> None:
        super().__init__(err, why)
        self.code = code
        self.head = bytes(head).decode(errors="replace")


def _connection(url: str, connect_s: float) -> tuple[http.client.HTTPConnection, str]:
    """A connection to `url`'s server (not yet connected) and the request target; ValueError
    for anything but an http(s) URL with a host (a bad port too)."""
    parts = urllib.parse.urlsplit(url)
    kind = {"http": http.client.HTTPConnection, "https": http.client.HTTPSConnection}
    if parts.scheme not in kind or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return kind[parts.scheme](parts.hostname, parts.port, timeout=connect_s), target


def _read_by(r: http.client.HTTPResponse, sock: socket.socket, by: float) -> bytes | None:
    """The next piece of `r`'s body (b"" at its end), or None when none came by `by`."""
    left = by - time.monotonic()
    if left <= 0:
        return None
    sock.settimeout(left)
    try:
        return r.read1(_PIECE)
    except TimeoutError:
        return None


def _body(r: http.client.HTTPResponse, sock: socket.socket, d: Deadline, start: float,
          max_bytes: int, url: str) -> str:  # fmt: skip
    """`r`'s whole body by `d`'s deadline, within `max_bytes`; else `CutAnswer`."""
    body = bytearray()
    while True:
        piece = _read_by(r, sock, d.answer_by(start, len(body)))
        if piece is None:
            took = time.monotonic() - start
            raise CutAnswer(errno.ETIMEDOUT, f"no whole answer in {took:.1f} s from {url} "
                            f"({len(body)} bytes came)", r.status, body)  # fmt: skip
        if not piece:
            return body.decode(errors="replace")
        body += piece
        if len(body) > max_bytes:
            raise CutAnswer(errno.EFBIG, f"an answer over {max_bytes} bytes from {url}",
                            r.status, body[:max_bytes])  # fmt: skip


def http_get(url: str, timeout: float | Deadline = 2.0,
             max_bytes: int = MAX_ANSWER) -> tuple[int, str]:  # fmt: skip
    """GET `url` directly (http_proxy ignored: the Lighthouse is local): (code, body), the
    body "" when the code is not 2xx. Raises OSError, or ValueError for a URL that is not
    http(s).

    `timeout`: a `Deadline`, or seconds both to connect and for the whole answer. Every read
    waits at most until the deadline, and the body must stay within `max_bytes`: a server
    that streams without end or trickles bytes raises `CutAnswer` (with what came) instead of
    holding the caller (a scrape, `status`) and filling its memory."""
    d = timeout if isinstance(timeout, Deadline) else Deadline(timeout, timeout)
    conn, target = _connection(url, d.connect_s)
    try:
        conn.connect()
        start, sock = time.monotonic(), conn.sock
        sock.settimeout(d.answer_s)
        conn.request("GET", target)
        with conn.getresponse() as r:
            if not 200 <= r.status < 300:
                return r.status, ""
            return r.status, _body(r, sock, d, start, max_bytes, url)
    except http.client.HTTPException as e:  # not HTTP: no status line, a cut chunk...
        raise OSError(errno.EPROTO, f"{type(e).__name__} from {url}: {e}") from None
    finally:
        conn.close()


def answers(url: str, timeout: float = 1.0) -> bool:
    """Does `url` answer 200 (the readiness check)?"""
    try:
        return http_get(url, timeout)[0] == 200
    except (OSError, ValueError):
        return False


def fetch(lighthouse: str, timeout: float = 1.0) -> QuorumPage | None:
    """The parsed /status page of the Lighthouse at `lighthouse` (its base address): what the
    replicas' watchers read (a spare's, the peer watch, the launcher's watchdog). None, no
    evidence at all, when it does not answer 200 or its answer is no Lighthouse page (no
    quorum id could be read). A page with items it could not read is returned, its
    `rejected` counting them: the heartbeats it lists are true, but only a `readable` page
    says that an id missing from it is gone."""
    try:
        code, text = http_get(lighthouse.rstrip("/") + "/status", timeout=timeout)
    except (OSError, ValueError):
        return None
    page = parse_status_html(text) if code == 200 else None
    return page if page is not None and page.quorum_id is not None else None


# ---------------------------------------------------------------- what a person is shown

# a replica id's state on the page, in the order a person is shown them (worst first)
LOST = "lost"  # in the quorum, its heartbeat old or missing: the survivors wait on it
LATE = "late"  # in the quorum, its last heartbeat older than LATE_S (not old yet)
HEALING = "healing"  # in the quorum, recovering: fetching the state from a peer
JOINING = "joining"  # heartbeating, not in the quorum: started, waiting for the next one
GONE = "gone"  # an old heartbeat only: an attempt that ended, still listed by the Lighthouse
TRAINING = "training"  # in the quorum, its heartbeat fresh: nothing to show
PAGE_STATES = (LOST, LATE, HEALING, JOINING, GONE, TRAINING)
# ten of torchft's heartbeat intervals: a live replica beats every 100 ms
LATE_S = 10 * TORCHFT_HEARTBEAT_INTERVAL_MS / 1000


@dataclass
class ReplicaView:
    """One replica id of the page, as a person is shown it."""

    replica_id: str
    state: str
    member: bool = False
    recovering: bool = False
    step: int | None = None
    manager: str | None = None
    heartbeat_age_s: float | None = None
    old: bool = False


@dataclass
class PageSummary:
    """The page in counts, and its replica ids worst first (`replicas`; the ones not
    training first, then the training ones): what a person reads at 1,024 replicas, where
    the page lists every member and heartbeat."""

    members: int = 0  # of the quorum that trains now (torchft's "previous quorum")
    heartbeating: int = 0  # live heartbeats
    late: int = 0  # live heartbeats older than LATE_S
    old: int = 0  # heartbeats the Lighthouse marks old
    states: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PAGE_STATES, 0))
    replicas: list[ReplicaView] = field(default_factory=list)

    @property
    def not_training(self) -> list[ReplicaView]:
        return [r for r in self.replicas if r.state != TRAINING]

    def counts(self) -> dict[str, Any]:
        """The counts alone (the JSON's `summary`: the lists are in the page already)."""
        return {"members": self.members, "heartbeating": self.heartbeating, "late": self.late,
                "old": self.old, "late_after_s": LATE_S, "states": dict(self.states)}  # fmt: skip


def _member_state(m: Member, beat: Heartbeat | None) -> str:
    if beat is None or beat.old:
        return LOST
    if m.recovering:
        return HEALING
    return LATE if beat.age_s is not None and beat.age_s > LATE_S else TRAINING


def _order(r: ReplicaView) -> tuple[int, int, str]:
    """Worst state first; then by replica index (`_2` before `_10`), then id."""
    _, index, _ = split_replica_id(r.replica_id)
    return PAGE_STATES.index(r.state), index if index is not None else -1, r.replica_id


def summarize(page: QuorumPage) -> PageSummary:
    """Each replica id of `page` in one state (`PAGE_STATES`), counted; one pass over its
    items (an id listed twice keeps its freshest heartbeat)."""
    beats: dict[str, Heartbeat] = {}
    for h in page.heartbeats:
        seen = beats.get(h.replica_id)
        if seen is None or (h.age_s or 0.0) < (seen.age_s or 0.0):
            beats[h.replica_id] = h
    s = PageSummary(members=len(page.members))
    live = [h for h in beats.values() if not h.old]
    s.heartbeating, s.old = len(live), len(beats) - len(live)
    s.late = sum(1 for h in live if h.age_s is not None and h.age_s > LATE_S)
    members = set()
    for m in page.members:
        beat = beats.get(m.replica_id)
        members.add(m.replica_id)
        s.replicas.append(ReplicaView(
            m.replica_id, _member_state(m, beat), member=True, recovering=m.recovering,
            step=m.step, manager=m.manager, heartbeat_age_s=beat.age_s if beat else None,
            old=beat.old if beat else False,
        ))  # fmt: skip
    for rid, h in beats.items():
        if rid not in members:
            s.replicas.append(ReplicaView(rid, GONE if h.old else JOINING,
                                          heartbeat_age_s=h.age_s, old=h.old))  # fmt: skip
    for r in s.replicas:
        s.states[r.state] += 1
    s.replicas.sort(key=_order)
    return s


@dataclass
class CutPage(QuorumPage):
    """The start of a /status page whose rest did not come (too big, too slow): what it
    lists is true, but an id it does not list may be in the rest. Counted unreadable
    (`rejected`); `whole(page)` tells it from a page that came whole."""


def whole(page: QuorumPage) -> bool:
    """The page came whole (its items may still be unreadable: `rejected`), so an id it
    does not name is not on the Lighthouse's page: a cut page's missing ids say nothing."""
    return not isinstance(page, CutPage)


@dataclass
class PageRead:
    """One read of /status by a command: the page (None: no Lighthouse page came), why not
    or why only its start came (`error`), how big it was and how long it took."""

    url: str
    page: QuorumPage | None = None
    error: str | None = None
    size: int = 0  # characters read
    seconds: float = 0.0
    cut: bool = False  # only the start came (too big, too slow): the lists are partial


Getter = Callable[[str, Deadline], tuple[int, str]]  # http_get's shape


def read_page(url: str, deadline: Deadline, get: Getter | None = None) -> PageRead:
    """Read and parse the /status page at `url` once (`get`: the GET; None: `http_get`).

    A Lighthouse that answered is never reported down: a whole 200 answer is parsed
    whatever it holds (the parser never raises; what it could not read is `rejected`), and
    an answer cut short (over `MAX_ANSWER`, past the deadline) is parsed from what came when
    that is the start of a Lighthouse page (its quorum id read), counted unreadable
    (`rejected`), as what it leaves out says nothing. A server that sends no such start (one
    that streams junk) is no Lighthouse page: None."""
    t0 = time.monotonic()
    cut = None
    try:
        code, text = (get or http_get)(url, deadline)
    except CutAnswer as e:
        code, text, cut = e.code, e.head, e.strerror
    except (OSError, ValueError) as e:
        why = getattr(e, "reason", e)
        return PageRead(url, error=f"{url}: {why}", seconds=time.monotonic() - t0)
    read = PageRead(url, size=len(text), seconds=time.monotonic() - t0, cut=cut is not None)
    if code != 200:
        read.error = f"HTTP {code} from {url}"
        return read
    page = parse_status_html(text)
    if cut is not None:
        read.error = cut
        page = CutPage(**{f.name: getattr(page, f.name) for f in fields(page)})
        page.rejected += 1
        if page.quorum_id is None:
            return read
    read.page = page
    return read
