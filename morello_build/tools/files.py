"""Atomic file output, the one way the tools write files: a temporary name in the final directory, then
``os.replace``, so a reader (a build, another process) never sees a partial file."""

from __future__ import annotations

import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path beside ``path`` (same suffix) to write; it replaces ``path`` if the block
    succeeds and is removed if it fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, _final_mode(path, tmp))
        try:
            os.replace(tmp, path)
        except OSError as e:  # name the user's path (e.g. a directory), not our temporary file
            raise type(e)(e.errno, e.strerror, str(path)) from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass  # replaced: nothing left to remove


def _final_mode(path: Path, tmp: str) -> int:
    """The mode ``path`` gets: an existing file keeps its own (a user's ``chmod``); a new one gets what
    ``open`` would give it under the umask (mkstemp makes 0600), executable if the writer made it so."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        pass
    executable = os.stat(tmp).st_mode & 0o111
    return (0o777 if executable else 0o666) & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it: put it back at once
    os.umask(mask)
    return mask


def write_if_changed(path: str | os.PathLike, data: str | bytes) -> bool:
    """Write ``data`` atomically, only if the file's bytes differ (its mtime stays, so builds that depend
    on it do not rerun). Returns whether it wrote."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        if Path(path).read_bytes() == raw:
            return False
    except OSError:
        pass
    with atomic_output(path) as tmp:
        Path(tmp).write_bytes(raw)
    return True
