"""Error types shared by the whole package.

`UserError` is for mistakes a user can fix (bad input, missing package, wrong state): the CLI
prints its one-line message and exits with code 2, never a traceback. Library code raises it
instead of calling click, so the Python API and the tests see a normal exception.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix; the message says how."""

    exit_code = 2
