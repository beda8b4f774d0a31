"""The Lighthouse's HTTP /status page: a pure, lenient parser of its HTML, and its fetch.

There is no JSON endpoint: the quorum as `ftslurm lighthouse status` shows it comes from
this fragment. Tests run the parser on pages recorded from the real Lighthouse
(tests/fixtures/lighthouse).
"""

from __future__ import annotations

import errno
import html
import re
import time
import urllib.error
import urllib.request

# the page's types are the run model's quorum types (ftslurm/run/quorum.py); the names stay here
from ftslurm.run.quorum import Heartbeat as Heartbeat
from ftslurm.run.quorum import PageMember as Member
from ftslurm.run.quorum import QuorumPage as QuorumPage

_DURATION_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9, "m": 60.0}


def parse_duration(text: str) -> float | None:
    """`0.084761762s` (what the page shows), also `84.7ms` etc. (Rust's Debug form) -> s."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(s|ms|µs|us|ns|m)\s*", text)
    if not m:
        return None
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


def _int(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text)
    return int(m.group(1)) if m else None


def _text(pattern: str, text: str) -> str | None:
    m = re.search(pattern, text, re.S)
    return html.unescape(m.group(1).strip()) if m else None


def parse_status_html(page: str) -> QuorumPage:
    """Parse the /status fragment. Pure and lenient: a missing piece is None / empty, never an
    exception (formats drift between nightlies)."""
    q = QuorumPage()
    q.quorum_id = _int(r"Current quorum_id:\s*(\d+)", page)
    q.next_status = _text(r"Next quorum status:\s*(.*?)\s*(?:<br\s*/?>|<h\d|\n\s*\n|$)", page)
    q.previous_quorum_id = _int(r"Previous quorum id:\s*(\d+)", page)
    q.num_participants = _int(r"Num participants:\s*(\d+)", page)
    age = _text(r"Quorum age:\s*([^<\s]+)", page)
    q.quorum_age_s = parse_duration(age) if age else None
    for block in re.split(r'<div class="member', page)[1:]:
        classes, _, body = block.partition(">")
        body = body.split("</div>")[0]
        rid = _text(r"<b>(.*?)</b>", body)
        if rid is None:
            continue
        q.members.append(
            Member(
                replica_id=rid,
                step=_int(r"Step:\s*(-?\d+)", body),
                manager=_text(r"Manager:\s*(\S+?)\s*<br", body),
                store=_text(r"TCPStore:\s*(\S+?)\s*<br", body),
                world_size=_int(r"World size:\s*(\d+)", body),
                recovering="recovering" in classes,
            )
        )
    for m in re.finditer(
        r'<li class="heartbeat([^"]*)">\s*(.*?):\s+seen\s+(\S+)\s+ago\s*</li>', page, re.S
    ):
        q.heartbeats.append(
            Heartbeat(
                replica_id=html.unescape(m.group(2).strip()),
                age_s=parse_duration(m.group(3)),
                old="old" in m.group(1).split(),
            )
        )
    return q


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
    """The parsed /status page of the Lighthouse at `lighthouse` (its base address), or None
    when it does not answer 200: what the replicas' watchers read (a spare's, the peer watch,
    the launcher's watchdog)."""
    try:
        code, text = http_get(lighthouse.rstrip("/") + "/status", timeout=timeout)
    except (OSError, ValueError):
        return None
    return parse_status_html(text) if code == 200 else None
