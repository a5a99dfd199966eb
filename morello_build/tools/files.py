"""Atomic file output, the one way the tools write files: a temporary name in the final directory, then
``os.replace``, so a reader (a build, another process) never sees a partial file."""

from __future__ import annotations

import os
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
        os.replace(tmp, path)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass  # replaced: nothing left to remove


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
