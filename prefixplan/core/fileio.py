"""Atomic file output: write to a temp file in the same folder, fsync, rename.

A path that cannot be written (missing permission, a folder, a read-only file system) is a
:class:`~prefixplan.errors.UsageError` naming the path, not a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from prefixplan.errors import UsageError


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; ``-`` writes to stdout.

    Raises:
        UsageError: ``path`` cannot be written (the message names it and why).
    """
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, fsync, rename)."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a folder", hint="give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())  # mkstemp makes 0600 files; outputs follow the umask
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise


STALE_TEMP_SECONDS = 600.0


def clean_stale_temps(path: str | Path, *, now: float | None = None, older_than: float = STALE_TEMP_SECONDS) -> int:
    """Remove ``.<name>.*.tmp`` files that :func:`atomic_write_bytes` left beside ``path`` when its
    process was killed mid-write; only files older than ``older_than`` seconds, so a concurrent
    writer's temp file is left alone. Returns how many were removed."""
    import time

    path = Path(path)
    cutoff = (time.time() if now is None else now) - older_than
    removed = 0
    try:
        leftovers = list(path.parent.glob(f".{glob_escape(path.name)}.*.tmp"))
    except OSError:
        return 0
    for tmp in leftovers:
        with contextlib.suppress(OSError):
            if tmp.is_file() and tmp.stat().st_mtime < cutoff:
                tmp.unlink()
                removed += 1
    return removed


def glob_escape(name: str) -> str:
    """``name`` with glob metacharacters escaped."""
    import glob

    return glob.escape(name)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=1) + "\n")
