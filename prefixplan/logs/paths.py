"""Inputs: which files a list of paths, globs, folders and URLs names (:func:`expand_paths`),
how big they are, and how far reading them got (:class:`ReadMeter`, for progress bars)."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prefixplan.errors import InputError
from prefixplan.logs.open import STDIN
from prefixplan.logs.remote import expand_url, is_url, remote_size


def _dir_files(path: str) -> list[str]:
    names = sorted(n for n in os.listdir(path) if not n.startswith("."))
    return [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]


def expand_paths(specs: Sequence[str]) -> list[str]:
    """Expand file names, globs, directories and ``"-"`` (stdin) into a list of inputs.

    An existing file is taken literally even if its name contains glob characters; a glob
    expands to its matches in sorted order; a directory to its non-hidden files in sorted
    order. Duplicates are dropped, first occurrence kept.

    A URL (``s3://``, ``gs://``, ``az://``, ``https://``) expands the same way in its store: a
    glob to its matches, a prefix to the files under it (:func:`prefixplan.logs.remote.expand_url`).

    Raises:
        InputError: a file does not exist or a glob matches nothing (the message names it).
        UsageError: a URL's storage extra is not installed (the hint names it).
    """
    out: list[str] = []
    seen: set[str] = set()
    for spec in specs:
        if spec == STDIN:
            found = [STDIN]
        elif is_url(spec):
            found = expand_url(spec)
        else:
            path = os.path.expanduser(spec)
            if os.path.isfile(path) or (os.path.exists(path) and not os.path.isdir(path)):
                found = [path]  # regular files, and pipes or devices (process substitution, /dev/stdin)
            elif os.path.isdir(path):
                found = _dir_files(path)
                if not found:
                    raise InputError(f"log directory {spec} has no files")
            elif glob.has_magic(path):
                found = [p for p in sorted(glob.glob(path, recursive=True)) if os.path.isfile(p)]
                if not found:
                    raise InputError(f"no log files match {spec}", hint="check the pattern and quote it")
            else:
                raise InputError(
                    f"log file not found: {spec}", hint="check the path; a folder, a glob or - (stdin) also work"
                )
        for item in found:
            if item not in seen:
                seen.add(item)
                out.append(item)
    if not out:
        raise InputError("no log files given")
    return out


def input_size(path: str) -> int | None:
    """Bytes of one input (local file or URL); None for stdin, pipes and unknown sizes."""
    if path == STDIN:
        return None
    if is_url(path):
        return remote_size(path)
    try:
        return os.path.getsize(path) if os.path.isfile(path) else None
    except OSError:
        return None


@dataclass(slots=True)
class ReadMeter:
    """How far reading got, in bytes of the (compressed) input files, for progress bars.

    ``total_bytes`` is the sum of the regular files' sizes (None when an input has no size, e.g.
    stdin or a pipe); :meth:`done` is the bytes of finished files plus the current position.
    """

    total_bytes: int | None = None
    _finished: int = 0
    _raw: Any = None
    _size: int = 0

    @classmethod
    def for_paths(cls, paths: Sequence[str]) -> ReadMeter:
        total: int | None = 0
        for path in paths:
            size = input_size(path)
            if size is None:
                total = None
                break
            total = (total or 0) + size
        return cls(total_bytes=total)

    def opened(self, raw: Any) -> None:
        self._raw = raw
        size = getattr(raw, "size", None)  # a remote file knows its size
        if isinstance(size, int):
            self._size = size
            return
        try:
            self._size = os.fstat(raw.fileno()).st_size
        except (OSError, ValueError):
            self._size = 0

    def add_done(self, size: int) -> None:
        """Count a whole input read elsewhere (by a worker)."""
        self._finished += int(size)

    def closed(self) -> None:
        self._finished += self._size
        self._raw, self._size = None, 0

    def done(self) -> int:
        position = 0
        if self._raw is not None:
            try:
                position = self._raw.tell()
            except (OSError, ValueError):  # closed at the end of the file: it was read in full
                position = self._size
        return self._finished + position
