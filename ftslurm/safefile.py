"""Create, append to and read state files without following links planted at their names.

Why: some commands run under sudo (the README's `sudo ftslurm simulate-failure`, `sudo ftslurm
cluster up`), and their state lives in folders other users may be able to write. A symbolic
link planted at `lighthouse.json` or `events.jsonl` would otherwise make root overwrite or
append to whatever it points at (/etc/passwd), and a FIFO would make it hang. So the last path
component is never followed (O_NOFOLLOW), only regular files are written or read, files are
created private (0o600 unless a caller says why not), and folders ftslurm creates for its own
state are private too (0o700). Every state-file write in ftslurm goes through this module.

- `open_append`: logs and the event log (one `write` per line, O_APPEND); a link, a FIFO or a
  file with a second hard link is refused with one `UnsafePath` line.
- `write_atomic`: whole-file state (pidfile, state JSON, launcher copy): a fresh file made with
  O_EXCL then renamed over the name, so a link planted there is replaced, never followed.
- `read_text`: a state file read back, None when missing, a link, not a regular file or bigger
  than a state file can be (a link to /dev/zero must not hang or fill memory).
- `read_checked`: the same for a file whose absence is normal but whose refusal must be said
  (`cluster.json`): None when missing, `UnsafePath` for a link, a FIFO or a file too big.
- `read_own`: the same for a record only this user (or root) may have written: a file of
  another user, or one others can write (`untrusted`, `untrusted_dir`), is refused too.
- `real_dir`: a folder ftslurm writes into, refused when its name is a link (a planted
  `slots -> /etc` must not make root create or replace files there).
- `open_append` also serves as a lock file's open: it never truncates.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from pathlib import Path

from ftslurm.errors import UserError

FILE_MODE = 0o600
DIR_MODE = 0o700
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY


class UnsafePath(UserError):
    """A state file's name is a link, a FIFO, a device or a file with other hard links."""

    why: str = ""


def _refuse(path: Path, why: str, verb: str = "write") -> UnsafePath:
    """The one-line refusal; `.why` holds the reason alone (for a caller's own sentence)."""
    e = UnsafePath(
        f"refusing to {verb} {path}: {why}; ftslurm never follows such a name (someone may be "
        "redirecting what it reads or writes): remove it and run the command again"
    )
    e.why = why
    return e


def _check_regular(fd: int, path: Path) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "it is not a regular file")
    if st.st_nlink > 1:
        raise _refuse(path, "it has another hard link (the same file under a second name)")


def open_append(path: str | Path, mode: int = FILE_MODE) -> int:
    """A file descriptor appending to `path` (created with `mode` if missing); the caller
    closes it. Raises UnsafePath (a one-line UserError) for a link or a non-regular file."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | _NOFOLLOW
    try:
        fd = os.open(path, flags, mode)  # O_NONBLOCK: a planted FIFO must not hang the open
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _refuse(path, "it is a symbolic link") from None
        if e.errno == errno.ENXIO:  # a FIFO without a reader
            raise _refuse(path, "it is not a regular file") from None
        raise
    try:
        _check_regular(fd, path)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _fresh_file(path: Path, data: str | bytes, mode: int) -> Path:
    """`data` in a new file beside `path` (O_EXCL: never an existing name or a link), to be
    published under `path` by rename or link."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def write_atomic(path: str | Path, data: str | bytes, mode: int = FILE_MODE) -> None:
    """Replace `path` with `data` in one rename, so readers never see half a file and a link
    planted at `path` is replaced (rename does not follow it), never written through."""
    path = Path(path)
    tmp = _fresh_file(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_exclusive(path: str | Path, data: str | bytes, mode: int = FILE_MODE) -> bool:
    """Create `path` with `data` only if no file has that name; False when one has. Atomic and
    whole: the data goes to a fresh file first and is published with link(2), which fails on
    an existing name (also over NFS), so of two racing writers exactly one wins and a reader
    never sees half a file (the claims of ftslurm/replica/slots.py)."""
    path = Path(path)
    tmp = _fresh_file(path, data, mode)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def read_bytes(path: str | Path, limit: int = 1 << 20) -> bytes | None:
    """The content of the regular file `path`, or None when it is missing, unreadable, a
    link, not a regular file or bigger than `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return raw if len(raw) <= limit else None


def read_checked_stat(path: str | Path, limit: int = 1 << 20,
                      own: bool = False) -> tuple[bytes, os.stat_result] | None:  # fmt: skip
    """The content of the regular file `path` and its `os.stat_result` (of the file opened,
    not of a name looked up apart: its mtime and owner are the content's); None when there
    is no such name. A link, a FIFO, a device, a folder, an unreadable file or one bigger than
    `limit` bytes is an `UnsafePath` (one line): reading one would follow a planted name,
    hang, or fill memory. `own`: a file another user may have written (`untrusted`) is one
    too (`read_own`)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        why = "it is a symbolic link" if e.errno == errno.ELOOP else (e.strerror or str(e))
        raise _refuse(path, why, "read") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, "it is not a regular file", "read")
        if own and (why := untrusted(st)) is not None:
            raise _refuse(path, why, "read")
        raw = os.read(fd, limit + 1)
    except OSError as e:
        raise _refuse(path, e.strerror or str(e), "read") from None
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise _refuse(path, f"it is bigger than {limit} bytes", "read")
    return raw, st


def read_checked(path: str | Path, limit: int = 1 << 20, own: bool = False) -> bytes | None:
    """`read_checked_stat`'s content alone."""
    got = read_checked_stat(path, limit, own)
    return got[0] if got is not None else None


def untrusted(st: os.stat_result) -> str | None:
    """Why a file or folder (its `os.stat_result`) cannot hold what this user wrote (None: it
    can): it belongs to a user other than this one and root, or group or other users may
    write it. Why: a launcher acts on the records its own earlier attempts left (how often a
    node failed, so it drains it); a record another user could plant or edit must not steer
    it, least of all when it runs as root."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"it belongs to uid {st.st_uid}, not to this user ({os.geteuid()}) or root"
    if st.st_mode & 0o022:
        return f"other users can write it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def untrusted_dir(path: str | Path) -> str | None:
    """`untrusted` for the folder `path`, which must also be a real folder, not a link (None:
    it is missing, or it is this user's or root's and no one else can write it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return "it is a symbolic link" if stat.S_ISLNK(st.st_mode) else "it is not a folder"
    return untrusted(st)


def read_own(path: str | Path, limit: int = 1 << 20) -> bytes | None:
    """`read_checked` for a record this user (or root) wrote: None when there is no such
    name; `UnsafePath` (its `.why` alone for the caller's own sentence) also when the file
    belongs to another user or others can write it (`untrusted`). The owner is that of the
    file opened, not of a name looked up before: a swap in between changes nothing."""
    return read_checked(path, limit, own=True)


def read_text(path: str | Path, limit: int = 1 << 20) -> str | None:
    """`read_bytes` decoded as UTF-8; None also when it is not UTF-8."""
    raw = read_bytes(path, limit)
    try:
        return raw.decode() if raw is not None else None
    except UnicodeDecodeError:
        return None


def real_dir(path: str | Path, private: bool = False) -> Path:
    """`path` as a folder to write into, created when missing (with `private`: 0o700 and its
    parents, as `private_dir`; else with the default mode, its parent must exist). A name
    that is a symbolic link or not a folder is an `UnsafePath`: the files written into it
    would land wherever the link points."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if private:
            private_dir(path)
        else:
            with contextlib.suppress(FileExistsError):
                path.mkdir()
        st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "it is a symbolic link", "write into")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "it is not a folder", "write into")
    return path


def private_dir(path: str | Path) -> Path:
    """Create `path` (and missing parents) for ftslurm's own state: the folder itself 0o700
    when created here, so no other user can plant a name in it; parents get the default
    mode (they may be shared, like `outputs/`); an existing folder is left as it is."""
    path = Path(path)
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # made by a concurrent command: theirs
            path.mkdir(mode=DIR_MODE)
    return path
