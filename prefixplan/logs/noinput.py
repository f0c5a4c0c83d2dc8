"""The errors for an input that gave no request: what it looked like and why nothing was read
(damage, a table with no rows, lines in no format prefixplan reads), or why nothing was left."""

from __future__ import annotations

from collections.abc import Sequence

from prefixplan.core.types import FORMATS
from prefixplan.errors import InputError
from prefixplan.logs.lineerrors import LineErrors

EMPTY_TABLE = "a header and no rows"
"""The note a table reader leaves on a file with columns and no rows."""


def nothing_left_error(
    errors: LineErrors, inputs: Sequence[str], *, windowed: bool = False, sample: float | None = None
) -> InputError:
    """The error for an input whose requests were all read and none was left to analyze: each
    render failure is counted with its line, and a time window (``windowed``: --since/--until) or
    a ``sample`` that left nothing is named."""
    where = ", ".join(inputs) or "the input"
    renders = errors.by_reason.get("render", 0)
    why = []
    if renders:
        first = next((s for s in errors.samples if s.reason.startswith("render")), None)
        example = f" (first: {first.source}:{first.line_no}: {first.reason[:160]})" if first else ""
        why.append(f"{renders} could not be rendered{example}")
    if windowed:
        why.append("the rest fell outside --since/--until" if renders else "none fell inside --since/--until")
    if sample is not None and sample < 1:
        why.append(f"--sample {sample:g} kept none")
    return InputError(
        f"no request left to analyze from {where}: {errors.requests_read} request(s) read; "
        + ("; ".join(why) or "none was kept"),
        hint="widen --since/--until or --sample, or fix the lines the report names (--strict stops at the first)",
    )


def no_requests_error(errors: LineErrors, inputs: Sequence[str]) -> InputError:
    """The error for a non-empty input that gave no request: which formats prefixplan reads, and
    what the first lines looked like."""
    where = ", ".join(inputs) or "the input"
    if errors.lines_read == 0 and errors.samples:  # nothing readable at all: say why
        why = "; ".join(f"{s.source}:{s.line_no}: {s.reason}" for s in errors.samples[:3])
        return InputError(f"no requests read from {where}: {why}", hint="check the file is what its name says")
    empty = [
        f"{source} has {note}"
        for source, info in errors.sources.items()
        for note in info.notes
        if note.startswith(EMPTY_TABLE)
    ]
    if empty and errors.count == 0 and errors.lines_read == len(empty):
        return InputError(
            f"no requests read from {where}: {'; '.join(empty)}",
            hint="a table log holds one request a row; check the file is the log you meant",
        )
    damage = "; ".join(
        f"{s.source}:{s.line_no}: {s.reason}" for s in errors.samples if s.reason.startswith("corrupt input")
    )
    damaged = f"the input is damaged ({damage}); before the damage, " if damage else ""
    first = "; ".join(errors.first_lines)
    notes = "".join(
        f"; {source} was read as {info.reader} ({info.detected}): {'; '.join(info.notes)}"
        for source, info in errors.sources.items()
        if info.notes
    )
    return InputError(
        f"no requests read from {where}: {damaged}{errors.lines_read} non-empty line(s), "
        "none in a format prefixplan reads "
        f"({', '.join(FORMATS)}); {first}{notes}",
        hint=("copy the file again: it is truncated or damaged; " if damage else "")
        + "see docs/logs.md (or run prefixplan formats) for the formats; force one with --log-format FORMAT",
    )
