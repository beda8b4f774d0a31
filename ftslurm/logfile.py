"""Opening a log that may be an archive: `tft-12_0.out.gz`, or `tft-12_0.out` gzipped in place
(a postmortem copy someone compressed). Shared by `logs`/`status` (tail reading) and `report`
(whole-file parsing), so both read the same files the same way."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import BinaryIO

GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: Path) -> bool:
    """True when the file starts like a gzip stream (a log line never does)."""
    with open(path, "rb") as probe:
        return probe.read(2) == GZIP_MAGIC


def is_archive(path: Path) -> bool:
    """A log `open_log` decompresses: gzip by its first two bytes, or by a `.gz` name."""
    return is_gzip(path) or path.suffix == ".gz"


def open_log(path: Path) -> BinaryIO:
    """A log opened for binary reading; gzip files decompressed, known by their first two
    bytes or a `.gz` name (one that is not gzip raises OSError: a corrupt archive). Pipes must
    be spooled into files first (report.sources does): the first bytes are read twice."""
    if is_archive(path):
        import gzip

        fh = gzip.open(path, "rb")
        try:
            fh.peek(1)  # raise OSError now if it is not gzip
        except (EOFError, zlib.error) as e:  # cut in its header, or junk: a corrupt archive
            fh.close()
            raise OSError(f"{path}: {e}") from e
        return fh  # type: ignore[return-value]
    return open(path, "rb")  # noqa: SIM115
