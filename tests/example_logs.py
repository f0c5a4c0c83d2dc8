"""The bundled example log before and after its planted cache breaker is fixed, analyzed once per
test process (the analyses take seconds; several test modules read them).

"After" is the same traffic with the ``Current time: ...`` first line removed from every system
prompt (what the team would do to fix the breaker), written by :func:`without_timestamp`.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"
CAPACITY = 100_000
_TIME_LINE = re.compile(r"^Current time: [^\n]*\n")


def without_timestamp(src: Path, dst: Path) -> int:
    """Copy the log, removing the planted timestamp line from system prompts; returns how many
    prompts changed. Malformed lines are copied as they are."""
    changed = 0
    with gzip.open(src, "rt", encoding="utf-8") as fin, gzip.open(dst, "wt", encoding="utf-8") as fout:
        for line in fin:
            try:
                row = json.loads(line)
            except ValueError:
                fout.write(line)
                continue
            req = row.get("request") if isinstance(row, dict) else None
            messages = req.get("messages") if isinstance(req, dict) else None
            for m in messages if isinstance(messages, list) else []:
                if isinstance(m, dict) and m.get("role") == "system" and isinstance(m.get("content"), str):
                    new = _TIME_LINE.sub("", m["content"])
                    changed += new != m["content"]
                    m["content"] = new
            fout.write(json.dumps(row) + "\n" if isinstance(req, dict) else line)
    return changed


@functools.cache
def _workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="pp-example-"))


@functools.cache
def after_log() -> Path:
    path = _workdir() / "agent_log.fixed.jsonl.gz"
    assert without_timestamp(EXAMPLE, path) > 100
    return path


@functools.cache
def analysis_file(which: str = "before") -> Path:
    """``prefixplan analyze --json`` of the example (``before``) or of the fixed log (``after``),
    with a configured capacity of :data:`CAPACITY` tokens."""
    from prefixplan.cli.app import main

    log = EXAMPLE if which == "before" else after_log()
    out = _workdir() / f"{which}.json"
    argv = ["analyze", str(log), "--no-store", "-q", "--capacity", str(CAPACITY), "--json", str(out)]
    assert main(argv) == 0
    return out


def record(which: str = "before") -> dict[str, Any]:
    """A fresh copy of the analysis record (JSON form)."""
    return json.loads(analysis_file(which).read_text())
