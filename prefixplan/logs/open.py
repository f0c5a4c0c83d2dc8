"""Open log files (plain, gzip, zstd, stdin, URLs) and split them into bounded lines.

Compression is recognised by magic bytes, not by the file name, so ``log.jsonl`` that is
really gzip, or ``-`` fed with zstd, still reads. Lines are produced by reading fixed-size
chunks; a line longer than the limit is read and discarded chunk by chunk, so memory stays
bounded by ``max_line_bytes`` plus one chunk whatever the input looks like.
"""

from __future__ import annotations

import io
import sys
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO

from prefixplan.errors import InputError
from prefixplan.logs.gunzip import GzipReader

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CHUNK_BYTES = 1 << 20
STDIN = "-"


class CorruptInput(Exception):
    """A compressed stream ended early or is not valid (raised by :func:`iter_lines`)."""


@dataclass(frozen=True, slots=True)
class RawLine:
    """One physical line: ``data`` is None when the line was longer than the limit."""

    line_no: int
    data: bytes | None
    size: int


def corrupt_message(stream: object, exc: BaseException, lines: int) -> str:
    """A corrupt stream's error, saying which compression its first bytes announced."""
    kind = "gzip" if isinstance(stream, GzipReader) else "zstd" if "zstd" in type(stream).__module__ else None
    detail = str(exc) or type(exc).__name__
    if kind is None:
        return detail
    if lines == 0:
        return f"the file starts with {kind}'s magic bytes but is not {kind} data ({detail})"
    return f"{kind} data corrupt or truncated after line {lines} ({detail})"


def _peekable(stream: BinaryIO) -> io.BufferedReader:
    if isinstance(stream, io.BufferedReader):
        return stream
    return io.BufferedReader(stream)  # type: ignore[arg-type]


def _sniff(stream: io.BufferedReader) -> str:
    head = stream.peek(4)[:4]
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return "plain"


def _decompressed(stream: io.BufferedReader) -> BinaryIO:
    kind = _sniff(stream)
    if kind == "gzip":
        return GzipReader(stream)  # type: ignore[return-value]
    if kind == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)
    return stream


def decompress(raw: BinaryIO) -> BinaryIO:
    """``raw`` decompressed when its first bytes are gzip's or zstd's magic, else as it is."""
    return _decompressed(_peekable(raw))


@contextmanager
def open_log(path: str, on_open: Callable[[BinaryIO], None] | None = None) -> Iterator[BinaryIO]:
    """Open ``path`` (or stdin for ``"-"``) as a decompressed binary stream.

    Args:
        path: a file path, a URL (``s3://``, ``gs://``, ``az://``, ``https://``; see
            :mod:`prefixplan.logs.remote`), or ``"-"`` for standard input.
        on_open: receives the raw (compressed) file, e.g. to report how far reading got.

    Raises:
        InputError: the file cannot be opened.
    """
    if path == STDIN:
        yield _decompressed(_peekable(sys.stdin.buffer))
        return
    raw = open_raw(path)
    if on_open is not None:
        on_open(raw)
    try:
        yield _decompressed(_peekable(raw))
    finally:
        raw.close()


def open_raw(path: str) -> BinaryIO:
    """The raw (still compressed) bytes of a local file or a URL, as a binary file to close.

    Raises:
        InputError: the file cannot be opened.
    """
    if "://" in path:
        from prefixplan.logs.remote import is_url, open_remote

        if is_url(path):
            return open_remote(path)  # type: ignore[return-value]
    try:
        return open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot open log file {path}: {exc.strerror or exc}") from exc


def iter_lines(stream: BinaryIO, max_line_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> Iterator[RawLine]:
    """Split ``stream`` into lines without ever holding more than one line plus one chunk.

    The trailing newline (and a ``\\r`` before it) is removed. A last line without a newline
    is still produced. Lines over ``max_line_bytes`` come back with ``data=None`` and their
    full ``size``; their bytes are discarded as they are read.

    Raises:
        CorruptInput: the compressed stream is truncated or invalid.
    """
    # read1 returns what one underlying read produced, so a truncated gzip keeps the data
    # decompressed before the error instead of losing the whole chunk.
    read = getattr(stream, "read1", stream.read)
    pending: list[bytes] = []
    pending_len = 0
    too_long = False
    line_no = 0
    while True:
        try:
            buf = read(chunk_bytes)
        except (EOFError, OSError, zlib.error) as exc:  # truncated or not really gzip after its magic bytes
            raise CorruptInput(corrupt_message(stream, exc, line_no)) from exc
        except Exception as exc:  # zstandard.ZstdError and friends
            if type(exc).__name__ == "ZstdError":
                raise CorruptInput(corrupt_message(stream, exc, line_no)) from exc
            raise
        if not buf:
            break
        parts = buf.split(b"\n")
        last = parts.pop()
        for piece in parts:
            line_no += 1
            size = pending_len + len(piece)
            if too_long or size > max_line_bytes:
                yield RawLine(line_no, None, size)
            elif pending:
                pending.append(piece)
                yield RawLine(line_no, _strip_cr(b"".join(pending)), size)
            else:
                yield RawLine(line_no, _strip_cr(piece), size)
            pending = []
            pending_len = 0
            too_long = False
        if last:
            pending_len += len(last)
            if too_long or pending_len > max_line_bytes:
                too_long = True
                pending = []
            else:
                pending.append(last)
    if pending_len:
        line_no += 1
        if too_long:
            yield RawLine(line_no, None, pending_len)
        else:
            yield RawLine(line_no, _strip_cr(b"".join(pending)), pending_len)


def _strip_cr(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line
