"""Reading what earlier commands wrote: analysis records."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefixplan.analysis.record import AnalysisRecord


def load_analysis(path: str | os.PathLike[str]) -> AnalysisRecord:
    """Read an analysis record written by ``prefixplan analyze --json``."""
    from prefixplan.analysis.record_io import load_record

    return load_record(Path(path))
