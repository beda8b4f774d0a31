"""Text from logs, made safe to write to a terminal.

Log lines and the names in them (nodes, replica ids, file names, error texts) are written
back by `ftslurm report` and may hold anything a process printed: ESC sequences that move the
cursor, clear the screen, set the window title (OSC) or colour the rest of the session, other
C0 controls (BEL, backspace, carriage return) and their 8-bit C1 forms (CSI is U+009B). One
helper escapes them all, so that what a log says is shown, never done.
"""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls; `\n` only where the caller says a line may hold it
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
_CONTROL_NL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def printable(text: str, *, newlines: bool = False) -> str:
    """`text` with every control character written as `\\xNN` (ESC -> `\\x1b`), so a
    terminal shows it and does not act on it; `newlines=True` keeps `\\n` (multi-line text)."""
    return (_CONTROL if newlines else _CONTROL_NL).sub(_escape, text)
