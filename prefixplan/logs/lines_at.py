"""The requests logged at given lines, reading the log again but parsing only those lines.

The analysis keeps no request text; to show a candidate's token ids it renders the candidate's
representative request again (:mod:`prefixplan.analysis.representatives`). In a JSON-lines file
only the wanted lines are decoded (the others are split off and skipped, and the file is not read
past the last wanted line); engine server logs and tables are read as usual and filtered.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from prefixplan.core.types import Request
from prefixplan.logs.detect import JSONL, sniff
from prefixplan.logs.lineerrors import LineErrors
from prefixplan.logs.open import iter_lines, open_log
from prefixplan.logs.paths import expand_paths
from prefixplan.logs.read import ReadOptions, _parse_line, iter_requests
from prefixplan.logs.remote import shown
from prefixplan.logs.tables import table_format


def requests_at(paths: Sequence[str], options: ReadOptions, wanted: Iterable[tuple[str, int]]) -> list[Request]:
    """The requests of ``paths`` at the ``wanted`` (source, line) places, in input order
    (a line that no longer parses gives none: the log changed since)."""
    options = replace(options, strict=False, sample=None)  # the places were read with the run's options
    places: dict[str, set[int]] = {}
    for source, line in wanted:
        places.setdefault(source, set()).add(line)
    found: list[Request] = []
    errors = LineErrors()
    for path in expand_paths(paths):
        source = shown(path)
        lines = places.get(source)
        if not lines:
            continue
        if table_format(path, options.format) is None:
            with open_log(path) as stream:
                reader, _, raw_lines = sniff(iter_lines(stream, options.max_line_bytes), options.format)
                if reader == JSONL:
                    last = max(lines)
                    for raw in raw_lines:
                        if raw.line_no in lines:
                            found += _parse_line(source, raw.line_no, raw.data, raw.size, options, errors, _ignore)
                        if raw.line_no >= last:
                            break
                    continue
        found += [r for r in iter_requests([path], options, errors) if r.line_no in lines]
    return found


def _ignore(line_no: int, reason: str) -> None:
    return None
