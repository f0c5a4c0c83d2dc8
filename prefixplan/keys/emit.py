"""``analyze --emit-recipes DIR``: turn discovered prefixes into recipe files.

For each ranked candidate labelled ``system``, ``tools`` or ``system+tools`` that privacy
allows to store, the representative request is read again from the log and its system text
and covered tool schemas are written as recipe parts (``prefixplan.keys.recipes.emit_recipe``), so
the prefix found in traffic can be locked and guarded by ``prefixplan check``. Tool files hold
the schema as parsed from the log, serialised with its key order kept
(``json.dumps(tool, ensure_ascii=False)``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefixplan.analysis.record import AnalysisRecord
from prefixplan.keys import parse_key
from prefixplan.keys.lineage import assign_lineage
from prefixplan.keys.recipes import emit_recipe
from prefixplan.logs import LineErrors
from prefixplan.render.spans import message_text, tool_name
from prefixplan.render.stream import SourceOptions, iter_source_requests

EMIT_LABELS = ("system", "tools", "system+tools")


def emit_recipes(
    record: AnalysisRecord, source: SourceOptions, out_dir: str | Path, *, top: int | None = None
) -> list[Path]:
    """Write one recipe per eligible candidate (re-reading each one's example request from
    ``source``); returns the recipe paths."""
    wanted = [c for c in record.candidates if c.label in EMIT_LABELS and not c.withheld and c.example][: top or None]
    if not wanted:
        return []
    by_line = {(c.example.source, c.example.line): c for c in wanted if c.example is not None}
    found: dict[tuple[str, int], Any] = {}
    for req in iter_source_requests(source, LineErrors()):
        key = (req.source, req.line_no)
        if key in by_line:
            found[key] = req
            if len(found) == len(by_line):
                break
    paths: list[Path] = []
    used: set[str] = set()
    for key, cand in by_line.items():
        req = found.get(key)
        if req is None:
            continue
        system = None
        if "system" in cand.label and req.messages and req.messages[0].get("role") in ("system", "developer"):
            system = message_text(req.messages[0].get("content"))
        covered = set(cand.tool_names)
        tools = [json.dumps(t, ensure_ascii=False) for t in (req.tools or ()) if tool_name(t) in covered]
        name = cand.name or assign_lineage(cand.label, system_text=system, tool_names=sorted(covered), existing=[])
        if name in used:
            continue
        used.add(name)
        version = parse_key(cand.key).version if cand.key else 1
        desc = f"found by prefixplan analyze: {cand.hits} requests, {cand.length} tokens ({cand.label})"
        paths.append(
            emit_recipe(
                out_dir, name, version=version, system_text=system, tools=tools, model=req.model, description=desc
            )
        )
    return paths
