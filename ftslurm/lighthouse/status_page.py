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
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

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


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
MAX_ANSWER = 16 << 20  # a /status page of 10,000 replicas is about 4 MiB
_PIECE = 1 << 16


def http_get(url: str, timeout: float = 2.0, max_bytes: int = MAX_ANSWER) -> tuple[int, str]:
    """GET `url` directly (http_proxy ignored: the Lighthouse is local). Raises OSError.

    The body must come whole within `timeout` seconds (plus one read's `timeout`) and
    `max_bytes`: a server that streams without end or trickles bytes raises OSError instead
    of holding the caller (a scrape, `status`) and filling its memory."""
    deadline = time.monotonic() + timeout
    try:
        with _OPENER.open(url, timeout=timeout) as r:
            body = bytearray()
            while piece := r.read1(_PIECE):
                body += piece
                if len(body) > max_bytes:
                    raise OSError(errno.EFBIG, f"an answer over {max_bytes} bytes from {url}")
                if time.monotonic() > deadline:
                    raise TimeoutError(errno.ETIMEDOUT, f"no whole answer in {timeout:g} s "
                                       f"from {url}")  # fmt: skip
            return r.status, body.decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, ""


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
