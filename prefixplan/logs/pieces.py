"""One compressed (or remote) JSON-lines log read by several workers: decompressed once, in
line-aligned pieces on local disk.

A gzip or zstd stream cannot be entered in the middle, so :mod:`prefixplan.logs.ranges` cannot
cut it. :func:`spill` decompresses it here, in C (ISA-L for gzip), and writes the lines to
temporary files of about ``range_bytes`` each, every file ending at a line's end; each piece is
handed out as a :class:`~prefixplan.logs.ranges.ByteRange` over its own file, numbered with the
number of its first line in the whole log, so a worker reads it exactly as one reader of the
whole log reads those lines (same line numbers, sampling and malformed-line reports). This
process never splits or copies a line. The reader of a piece removes its file once it has
opened it, so the disk holds only the pieces not yet taken (the run's window).

A stream that turns out corrupt or truncated ends the last piece at the last whole line before
the damage; that piece carries the reader's error for the next line, which is what reading the
whole log in one process reports. A stream whose first lines are not JSON lines (an engine's
server log) or that fails before its format is known is not spilled (None from
:func:`sniffed_jsonl`); the caller reads it as before.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import zlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from prefixplan.logs.detect import JSONL, sniff
from prefixplan.logs.open import CorruptInput, corrupt_message, iter_lines
from prefixplan.logs.ranges import ByteRange

READ_BYTES = 1 << 20
"""Decompressed bytes taken from the stream at a time (the memory this takes is about this)."""


class _Recorder:
    """``stream`` read through ``read1``, every byte kept until :meth:`take` (the head the
    format sniffer looked at, written out before the rest)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._read = getattr(stream, "read1", stream.read)
        self.kept: list[bytes] = []

    def read1(self, n: int = -1) -> bytes:
        data = self._read(n)
        self.kept.append(data)
        return data

    read = read1

    def take(self) -> bytes:
        head, self.kept = b"".join(self.kept), []
        return head


def sniffed_jsonl(stream: BinaryIO, forced: str, max_line_bytes: int) -> tuple[str, bytes] | None:
    """(how the reader was chosen, the bytes already read) when ``stream`` holds JSON lines as
    :func:`~prefixplan.logs.detect.sniff` decides for a whole-log reader; None for another format
    or a stream that fails while its first lines are read."""
    recorder = _Recorder(stream)
    try:
        reader, how, _ = sniff(iter_lines(recorder, max_line_bytes), forced)  # type: ignore[arg-type]
    except CorruptInput:
        return None
    return (how, recorder.take()) if reader == JSONL else None


def spill(
    stream: BinaryIO,
    head: bytes,
    directory: str,
    range_bytes: int | Callable[[int], int],
    *,
    read_bytes: int = READ_BYTES,
) -> Iterator[ByteRange]:
    """The lines of ``head`` + the rest of ``stream`` as pieces of about ``range_bytes`` in files
    under ``directory`` (see the module docstring), in order. ``range_bytes`` may be a function
    of the bytes spilled so far, asked as each piece starts (pieces that shrink towards the end)."""
    read = getattr(stream, "read1", stream.read)
    size_of = range_bytes if callable(range_bytes) else lambda _spilled: range_bytes
    lines = 0  # newlines in the pieces before the current one
    spilled = 0
    piece = _Piece(directory, b"", read_bytes)
    target = size_of(spilled)
    try:
        buf = head
        while True:
            if buf:
                piece.write(buf)
                if piece.at_line_end and piece.size >= target:
                    done, piece = piece, _Piece(directory, piece.partial, read_bytes)
                    yield done.close(lines + 1)
                    lines += done.newlines
                    spilled += done.size
                    target = size_of(spilled)
            try:
                buf = read(read_bytes)
            except Exception as exc:
                if not _stream_error(exc):
                    raise
                # the bytes after the last newline are not a whole line: dropped, as a whole-log
                # reader drops them; the line after the last whole one is where it reports
                counted = lines + piece.newlines
                yield piece.close(lines + 1, corrupt=(counted + 1, corrupt_message(stream, exc, counted)))
                return
            if not buf:
                break
        piece.write_partial()
        if piece.size:
            yield piece.close(lines + 1)
        else:
            piece.discard()
    except BaseException:
        piece.discard()
        raise


def _stream_error(exc: BaseException) -> bool:
    """A decompression error (what :func:`~prefixplan.logs.open.iter_lines` reports as corrupt
    input), not a bug or an interrupt."""
    return isinstance(exc, (EOFError, OSError, zlib.error)) or type(exc).__name__ == "ZstdError"


class _Piece:
    """One temporary file being written: whole lines, then possibly the start of a line whose
    end has not come yet (``flushed`` bytes in the file, ``partial`` in memory; a line longer
    than ``hold`` bytes goes to the file as it comes, so memory stays bounded)."""

    def __init__(self, directory: str, partial: bytes, hold: int) -> None:
        fd, self.path = tempfile.mkstemp(prefix="piece-", suffix=".jsonl", dir=directory)
        self._fh: Any = os.fdopen(fd, "wb")
        self._hold = hold
        self.size = 0  # bytes in the file
        self.newlines = 0  # in the file
        self.flushed = 0  # bytes of an unfinished line in the file
        self.partial = partial  # bytes of an unfinished line not yet written

    @property
    def at_line_end(self) -> bool:
        return self.flushed == 0

    def write(self, buf: bytes) -> None:
        i = buf.rfind(b"\n")
        if i < 0:
            self.partial += buf
            if len(self.partial) > self._hold:
                self.write_partial()
            return
        whole = self.partial + buf[: i + 1] if self.partial else buf[: i + 1]
        self._fh.write(whole)
        self.size += len(whole)
        self.newlines += buf.count(b"\n")
        self.flushed = 0
        self.partial = buf[i + 1 :]

    def write_partial(self) -> None:
        self._fh.write(self.partial)
        self.size += len(self.partial)
        self.flushed += len(self.partial)
        self.partial = b""

    def close(self, first_line: int, corrupt: tuple[int, str] | None = None) -> ByteRange:
        """Close the file (after a corrupt stream, without the unfinished line) and describe it."""
        if corrupt is not None and self.flushed:
            self.size -= self.flushed
            self._fh.truncate(self.size)
        self._fh.close()
        line, message = corrupt if corrupt is not None else (0, "")
        return ByteRange(self.path, 0, self.size, first_line, spill=True, corrupt_line=line, corrupt=message)

    def discard(self) -> None:
        try:
            self._fh.close()
        finally:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
