"""Text from logs, made safe to write to a terminal.

Log lines and the names in them (nodes, replica ids, file names, error texts) are written
back by `ftslurm report`, `logs` and `status` and may hold anything a process printed: ESC
sequences that move the cursor, clear the screen, set the window title (OSC) or colour the
rest of the session, other C0 controls (BEL, backspace, carriage return) and their 8-bit C1
forms (CSI is U+009B). One helper escapes them all, so that what a log says is shown, never
done.
"""

from __future__ import annotations

import re

# SGR: `ESC[31m`, `ESC[0;1m`, `ESC[39m`: colour and weight only (torchtitan colours its steps)
_SGR = re.compile(r"\x1b\[[0-9;:]*m")


def _controls(keep: str) -> re.Pattern[str]:
    """C0 controls, DEL and C1 controls, less those in `keep`."""
    codes = [*range(0x20), *range(0x7F, 0xA0)]
    return re.compile("[" + re.escape("".join(chr(c) for c in codes if chr(c) not in keep)) + "]")


_CONTROLS = {
    (newlines, tabs): _controls("\n" * newlines + "\t" * tabs)
    for newlines in (False, True) for tabs in (False, True)
}  # fmt: skip


def _escape(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def printable(
    text: str, *, newlines: bool = False, tabs: bool = False, colours: bool = False
) -> str:
    """`text` with every control character written as `\\xNN` (ESC -> `\\x1b`), so a
    terminal shows it and does not act on it. `newlines=True` keeps `\\n` (multi-line text),
    `tabs=True` keeps tabs (a log line as it was written); `colours=True` drops the SGR colour
    codes (`ESC[32m`) first: they say nothing, and shown as text they bury the line (every
    torchtitan step line has six). Any other escape (OSC, cursor moves) is still shown."""
    if colours:
        text = _SGR.sub("", text)
    return _CONTROLS[newlines, tabs].sub(_escape, text)
