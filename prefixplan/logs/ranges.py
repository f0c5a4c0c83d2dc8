"""One big log file read by several workers: byte ranges of a plain JSON-lines file.

A local, uncompressed JSON-lines file can be cut anywhere: :func:`line_ranges` moves each cut to
the start of the next line (so every line falls in exactly one range, whatever the cut points)
and counts the lines before it (so each range knows the number of its first line), reading the
file once, sequentially, without parsing it. Each worker then opens the file itself, reads only
its range (:func:`read_range`) and parses it exactly as one reader of the whole file would:
the same line numbers, the same sampling, the same malformed-line reports. Compressed files
(gzip, zstd), URLs, stdin, engine server logs (records span lines) and tables are not split so.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from prefixplan.core.types import Request
from prefixplan.logs.detect import JSONL, sniff
from prefixplan.logs.lineerrors import LineErrors
from prefixplan.logs.open import GZIP_MAGIC, ZSTD_MAGIC, iter_lines
from prefixplan.logs.read import ReadOptions, _parse_line, _reporter, _sample_threshold, _sampled
from prefixplan.logs.tables import table_format

RANGE_BYTES = 16 * 2**20
"""About this many bytes of a file per range (a worker's job)."""
MIN_RANGE_BYTES = 256 * 2**10
"""Ranges are not made smaller than this (a job's overhead would show)."""
SCAN_BYTES = 8 * 2**20


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Lines ``first_line``... of ``path``, from byte ``start`` (a line start) to ``end`` (a
    line start, or the file's end).

    ``spill``: ``path`` is a temporary piece of a decompressed log (:mod:`prefixplan.logs.pieces`),
    removed by its reader; ``corrupt``: the log's stream failed after these lines, reported at
    line ``corrupt_line`` after them."""

    path: str
    start: int
    end: int
    first_line: int
    spill: bool = False
    corrupt_line: int = 0
    corrupt: str = ""


def splittable(path: str, options: ReadOptions) -> str | None:
    """How the reader was chosen (``auto-detected: JSON lines``, ...) when ``path`` is a local,
    uncompressed JSON-lines file that byte ranges can split; None otherwise."""
    if path == "-" or "://" in path or table_format(path, options.format) is not None:
        return None
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
            if head.startswith((GZIP_MAGIC, ZSTD_MAGIC)):
                return None
            fh.seek(0)
            reader, how, _ = sniff(iter_lines(fh, options.max_line_bytes), options.format)
    except OSError:
        return None  # the ordinary reader reports it
    return how if reader == JSONL else None


def range_size(size: int, workers: int) -> int:
    """Bytes per range for a file of ``size`` bytes and ``workers`` workers: at most
    :data:`RANGE_BYTES`, small enough for four ranges per worker, at least :data:`MIN_RANGE_BYTES`."""
    return max(MIN_RANGE_BYTES, min(RANGE_BYTES, size // max(1, 4 * workers)))


TAPER = 4
"""Near a file's end a range holds at most 1 / (``TAPER`` x readers) of what is left
(:func:`tapered_cuts`)."""


def taper(left: int, range_bytes: int, readers: int, min_bytes: int = MIN_RANGE_BYTES) -> int:
    """The next range's bytes when ``left`` bytes are left: ``range_bytes``, or less near the end
    (at most ``left`` / (:data:`TAPER` x ``readers``)), at least ``min_bytes``. The readers then
    run out of work together: with ranges of one size, the queue a reader keeps ahead of it (a few
    whole ranges) is what the others wait for at the end of the pass."""
    return max(min_bytes, min(range_bytes, left // (TAPER * max(1, readers))))


def tapered_cuts(size: int, range_bytes: int, readers: int, min_bytes: int = MIN_RANGE_BYTES) -> list[int]:
    """Byte offsets cutting a file of ``size`` bytes into ranges of :func:`taper` sizes."""
    cuts: list[int] = []
    pos = 0
    while True:
        step = taper(size - pos, range_bytes, readers, min_bytes)
        if pos + step >= size:
            return cuts
        pos += step
        cuts.append(pos)


def line_ranges(path: str, cuts: Sequence[int] | None = None, range_bytes: int = RANGE_BYTES) -> Iterator[ByteRange]:
    """The ranges of ``path`` between ``cuts`` (byte offsets, any; default every
    ``range_bytes``), each cut moved to the start of the line it falls in or the next line
    (empty ranges left out), with the number of each range's first line."""
    size = os.path.getsize(path)
    if cuts is None:
        cuts = range(range_bytes, size, max(1, range_bytes))
    wanted = sorted({c for c in cuts if 0 < c < size})
    start, first_line = 0, 1
    lines_before = 0  # newlines in [0, pos)
    pos = 0
    with open(path, "rb") as fh:
        for cut in wanted:
            if cut <= start:
                continue
            lines_before = _count_to(fh, pos, cut, lines_before)
            pos = cut
            # the range ends at the first line start at or after the cut
            fh.seek(cut - 1)
            boundary = _next_line_start(fh, cut - 1)
            lines_before = _count_to(fh, pos, boundary, lines_before)
            pos = boundary
            if boundary >= size:
                break
            if boundary > start:
                yield ByteRange(path, start, boundary, first_line)
                start, first_line = boundary, lines_before + 1
    if start < size:
        yield ByteRange(path, start, size, first_line)


def _count_to(fh: BinaryIO, pos: int, end: int, counted: int) -> int:
    """``counted`` plus the newlines in bytes [pos, end) of ``fh``."""
    fh.seek(pos)
    while pos < end:
        chunk = fh.read(min(SCAN_BYTES, end - pos))
        if not chunk:
            break
        counted += chunk.count(b"\n")
        pos += len(chunk)
    return counted


def _next_line_start(fh: BinaryIO, at: int) -> int:
    """The offset just after the first newline at or after ``at`` (the file's size if none)."""
    fh.seek(at)
    pos = at
    while True:
        chunk = fh.read(64 * 1024)
        if not chunk:
            return pos
        i = chunk.find(b"\n")
        if i >= 0:
            return pos + i + 1
        pos += len(chunk)


class _Window:
    """Bytes [start, end) of a file, read like a stream."""

    def __init__(self, fh: BinaryIO, start: int, end: int) -> None:
        fh.seek(start)
        self._fh = fh
        self._left = end - start

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if n < 0 else min(n, self._left)
        data = self._fh.read(n)
        self._left -= len(data)
        return data


def read_range(rng: ByteRange, options: ReadOptions, errors: LineErrors, source: str) -> Iterator[Request]:
    """The requests of ``rng``, read as one reader of the whole file reads those lines
    (``source``: the file's name in reports)."""
    bad = _reporter(errors, source, options.strict)
    threshold = _sample_threshold(options.sample)
    errors.opened(source)
    offset = rng.first_line - 1
    with open(rng.path, "rb") as fh:
        if rng.spill:
            _remove(rng.path)  # open: the piece is read to its end, and nothing else needs it
        for raw in iter_lines(_Window(fh, rng.start, rng.end), options.max_line_bytes):  # type: ignore[arg-type]
            line_no = raw.line_no + offset
            if threshold is not None and not _sampled(source, line_no, threshold):
                continue
            data = raw.data
            if data is not None and (not data or data.isspace()):
                continue
            yield from _parse_line(source, line_no, data, raw.size, options, errors, bad)
    if rng.corrupt:
        bad(rng.corrupt_line, f"corrupt input: {rng.corrupt}; the rest of the file is skipped")


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):  # already gone: the run's folder is removed at its end anyway
        os.unlink(path)
