"""CSV request logs, row by row from a (possibly compressed) stream: the first row is the header,
each later row is read like a JSON line whose keys are the header's names (the rules of
:mod:`prefixplan.logs.tables`). No line and no row is held past the per-record limit, whatever the
file looks like: a line longer than it is read on in bounded pieces and reported, never kept."""

from __future__ import annotations

import csv
import io
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, BinaryIO, cast

from prefixplan.logs.badline import BadLine
from prefixplan.logs.limits import clip
from prefixplan.logs.tables import TableCorrupt, TableShape, column_plan, row_object

_SKIP_CHARS = 1 << 20  # characters read at a time from a line too long to keep


class _BoundedLines:
    """The lines of a text stream for ``csv.reader``, none longer than ``limit`` characters: a
    longer one is read on in bounded pieces, dropped, and stands in the stream as ``None`` (which
    ``csv.reader`` refuses with an error for its row; :meth:`why` then says what happened)."""

    def __init__(self, text: io.TextIOBase, limit: int) -> None:
        self.text = text
        self.limit = limit
        self.too_long: int | None = None
        self.count = 0  # lines handed out (``csv.reader.line_num`` does not count a dropped one)

    def __iter__(self) -> _BoundedLines:
        return self

    def __next__(self) -> str | None:
        self.too_long = None
        line = self.text.readline(self.limit + 1)
        if not line:
            raise StopIteration
        self.count += 1
        if len(line) <= self.limit or line.endswith(("\n", "\r")):
            return line
        size = len(line)
        while not line.endswith(("\n", "\r")):
            line = self.text.readline(_SKIP_CHARS)
            if not line:
                break
            size += len(line)
        self.too_long = size
        return None

    def why(self) -> str | None:
        """The reason of the row the last line was dropped from, if it was."""
        if self.too_long is None:
            return None
        return f"line too long: {self.too_long:,} characters > max_line_bytes {self.limit:,} (skipped)"


def _text_bytes(cells: Sequence[str], limit: int) -> int:
    """UTF-8 bytes of ``cells`` (their characters when that many bytes cannot reach ``limit``)."""
    chars = sum(len(c) for c in cells)
    if chars * 4 <= limit:
        return chars
    return sum(len(c.encode("utf-8", "surrogatepass")) for c in cells)


def iter_csv(
    stream: BinaryIO,
    source: str,
    columns: tuple[tuple[str, str], ...],
    max_cell_bytes: int,
    shape: TableShape | None = None,
) -> Iterator[tuple[int, dict[str, Any] | BadLine]]:
    """(line the row starts on, row object or why it is bad) for each data row of a CSV stream.

    The first row is the header. Blank lines are skipped.

    Raises:
        TableCorrupt: the stream is not UTF-8 or its compression is damaged.
        UsageError: ``columns`` names a column the header does not have.
    """
    if csv.field_size_limit() < max_cell_bytes:
        csv.field_size_limit(max_cell_bytes)
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    lines = _BoundedLines(text, max_cell_bytes)
    reader = csv.reader(cast(Iterable[str], lines))  # a None it hands out fails that row
    start = 1
    try:
        try:
            header = next(reader, None)
        except csv.Error as exc:
            raise TableCorrupt(f"bad CSV header: {lines.why() or clip(exc)}") from None
        if header is None:
            return
        names = [h.strip() for h in header]
        plan = column_plan(names, columns, source)
        if shape is not None:
            shape.columns = len(names)
        while True:
            start = lines.count + 1
            try:
                cells = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                yield start, BadLine(lines.why() or f"bad CSV: {clip(exc)}")
                continue
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue
            if len(cells) != len(names):
                yield start, BadLine(f"bad CSV: the row has {len(cells)} cells, the header {len(names)}")
                continue
            size = _text_bytes(cells, max_cell_bytes)
            if size > max_cell_bytes:
                yield (
                    start,
                    BadLine(f"record too large: row of {size:,} bytes > max_line_bytes {max_cell_bytes:,} (skipped)"),
                )
                continue
            try:
                yield start, row_object(plan, dict(zip(names, cells, strict=True)), False)
            except BadLine as exc:
                yield start, exc
    except UnicodeDecodeError as exc:
        raise TableCorrupt(f"not UTF-8 text at line {start} ({exc.reason})") from None
    except (EOFError, OSError, zlib.error) as exc:
        raise TableCorrupt(f"compressed data corrupt or truncated at line {start} ({exc})") from None
    except Exception as exc:
        if type(exc).__name__ == "ZstdError":
            raise TableCorrupt(f"compressed data corrupt or truncated at line {start} ({exc})") from None
        raise
