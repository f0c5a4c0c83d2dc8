"""Reading analysis records back (:func:`load_record`) and viewing their candidates as a table."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefixplan.analysis.record import AnalysisRecord, CandidateRecord
from prefixplan.errors import InputError


def read_json_file(path: str | Path, what: str) -> Any:
    """Decode a JSON file (``-`` = stdin); errors say which file and why."""
    try:
        text = sys.stdin.read() if str(path) == "-" else Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(
            f"{what} {path}: no such file", hint="write one with prefixplan analyze LOG --json FILE"
        ) from None
    except IsADirectoryError:
        raise InputError(f"{what} {path}: is a folder, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{what} {path}: cannot read ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} {path}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise InputError(f"{what} {path}: JSON nested too deeply") from None


def load_record(path: str | Path) -> AnalysisRecord:
    """Read and validate the analysis record at ``path`` (``-`` = stdin).

    Raises:
        InputError: missing, unreadable, not JSON, not a record, newer schema, or a bad field.
    """
    return AnalysisRecord.from_json(read_json_file(path, "analysis record"), f"analysis record {path}")


def candidates_frame(candidates: Sequence[CandidateRecord]) -> Any:
    """Candidates as a pandas DataFrame, one row each (token ids and system text left out;
    needs ``pip install "prefixplan[pandas]"``)."""
    from prefixplan.core.extras import require

    pd = require("pandas", "pandas")
    rows = []
    for c in candidates:
        row = c.to_json()
        row.pop("token_ids", None)
        row.pop("system_head", None)
        row["parts"] = len(c.parts)
        row["example"] = f"{c.example.source}:{c.example.line}" if c.example else None
        rows.append(row)
    return pd.DataFrame(rows)
