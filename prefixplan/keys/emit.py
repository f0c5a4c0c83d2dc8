"""``analyze --emit-recipes DIR``: turn discovered prefixes into recipe files.

For each ranked candidate labelled ``system``, ``tools`` or ``system+tools`` that privacy
allows to store, the representative request is read again from the log and its system text
and covered tool schemas are written as recipe parts (:func:`emit_recipe`), so
the prefix found in traffic can be locked and guarded by ``prefixplan check``. Tool files hold
the schema as parsed from the log, serialised with its key order kept
(``json.dumps(tool, ensure_ascii=False)``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefixplan.analysis.record import AnalysisRecord
from prefixplan.core.types import Request
from prefixplan.errors import RecipeError
from prefixplan.keys import DEFAULT_RETAIN_SECONDS, NAME_RE, parse_key
from prefixplan.keys.lineage import assign_lineage
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
    found: dict[tuple[str, int], Request] = {}
    for req in iter_source_requests(source, LineErrors()):
        key = (req.source, req.line_no)
        if key in by_line:
            found[key] = req
            if len(found) == len(by_line):
                break
    paths: list[Path] = []
    used: set[str] = set()
    for key, cand in by_line.items():
        example = found.get(key)
        if example is None:
            continue
        req = example
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


def emit_recipe(
    out_dir: str | os.PathLike[str],
    name: str,
    *,
    version: int = 1,
    system_text: str | None = None,
    tools: Sequence[str | bytes] = (),
    documents: Sequence[str | bytes] = (),
    model: str | None = None,
    retain: int = DEFAULT_RETAIN_SECONDS,
    pin: bool = False,
    description: str | None = None,
) -> Path:
    """Write ``out_dir/<name>.yaml`` plus its part files so a discovered prefix joins the gate.

    Parts are written byte-exact (``parts/<name>/system.txt``, ``parts/<name>/tools/NN-<tool>.json``,
    ``parts/<name>/documents/NN.txt``), so the emitted recipe's content hash equals
    ``content_hash`` of the same parts. Used by ``analyze --emit-recipes DIR``.

    Raises:
        RecipeError: the name is invalid or no part is given.
    """
    if not NAME_RE.match(name):
        raise RecipeError(f"cannot emit a recipe named {name!r}: use letters, digits, '.', '_' or '-'")
    if system_text is None and not tools and not documents:
        raise RecipeError(f"cannot emit recipe {name}: it has no parts")
    import yaml

    from prefixplan.core.fileio import atomic_write_bytes, atomic_write_text

    out = Path(out_dir)
    base = out / "parts" / name
    entry: dict[str, Any] = {"name": name, "version": int(version)}
    if description:
        entry["description"] = description
    entry["retain"] = f"{retain // 86400}d" if retain % 86400 == 0 else int(retain)
    entry["pin"] = bool(pin)
    if model:
        entry["model"] = model

    def put(rel: str, data: str | bytes) -> str:
        atomic_write_bytes(base / rel, data.encode("utf-8") if isinstance(data, str) else data)
        return (Path("parts") / name / rel).as_posix()

    if system_text is not None:
        entry["system"] = {"file": put("system.txt", system_text)}
    tool_paths = []
    for i, t in enumerate(tools):
        from prefixplan.render.spans import schema_tool_name as tool_name

        raw = t.decode("utf-8", "replace") if isinstance(t, bytes) else t
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", tool_name(raw) or "tool")[:60]
        tool_paths.append(put(f"tools/{i:02d}-{slug}.json", t))
    if tool_paths:
        entry["tools"] = tool_paths
    doc_paths = [put(f"documents/{i:02d}.txt", d) for i, d in enumerate(documents)]
    if doc_paths:
        entry["documents"] = doc_paths
    path = out / f"{name}.yaml"
    header = "# Emitted by prefixplan from observed traffic. Review, then run `prefixplan lock`.\n"
    atomic_write_text(path, header + yaml.safe_dump({"prefixes": [entry]}, sort_keys=False, allow_unicode=True))
    return path
