"""Parsing one recipe entry's fields (system, tools, documents) into :class:`Part` records,
with field-path errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prefixplan.core import yamlsafe
from prefixplan.keys.chunking import chunk_text
from prefixplan.keys.recipe_model import CHUNK_MODES, Part, display_path
from prefixplan.keys.recipe_yaml import RecipeContext


def parse_duration(value: Any) -> int:
    """Seconds from ``7d`` / ``36h`` / ``90m`` / ``3600s`` / ``2w`` / an int; ValueError otherwise."""
    from prefixplan.core.durations import parse_seconds

    seconds = parse_seconds(value)
    if seconds != int(seconds):
        raise ValueError(f"invalid duration {value!r}: retention is whole seconds")
    return int(seconds)


def _read(ctx: RecipeContext, base: Path, rel: Any, path: str) -> tuple[Path, bytes] | None:
    if not isinstance(rel, str) or not rel.strip():
        ctx.err(path, "expected a file path")
        return None
    p = (base / rel).resolve()  # an absolute rel replaces base; symlinks are followed
    if not _confined(ctx, p, rel, path):
        return None
    if not p.is_file():
        ctx.err(path, f"file not found: {rel}")
        return None
    try:
        return p, p.read_bytes()
    except OSError as exc:
        ctx.err(path, f"cannot read {rel}: {exc.strerror}")
        return None


def _confined(ctx: RecipeContext, resolved: Path, rel: str, path: str) -> bool:
    """Parts must live under the repository (or the recipe's directory outside one): a recipe
    naming ``../../etc/passwd`` or ``/proc/self/environ`` would lock and lint a file that is not
    the team's prompt, and the lint would print what it matched."""
    if resolved.is_relative_to(ctx.root):
        return True
    ctx.err(
        path,
        f"{rel} is outside {display_path(ctx.root)} (after resolving links); "
        "recipe parts must live in the recipe's repository",
    )
    return False


def check_keys(ctx: RecipeContext, obj: dict[str, Any], allowed: Iterable[str], path: str) -> None:
    allowed = tuple(allowed)
    for k in obj:
        if k not in allowed:
            ctx.err(f"{path}.{k}", f"unknown field (allowed: {', '.join(allowed)})")


def system_part(ctx: RecipeContext, base: Path, value: Any, path: str) -> Part | None:
    if isinstance(value, str):
        return Part("system", "system", "inline", value.encode("utf-8"), None, ctx.line(path))
    if isinstance(value, dict):
        check_keys(ctx, value, ("file", "text"), path)
        if ("file" in value) == ("text" in value):
            ctx.err(path, "give exactly one of file or text")
            return None
        if "text" in value:
            if not isinstance(value["text"], str):
                ctx.err(f"{path}.text", "expected a string")
                return None
            return Part("system", "system", "inline", value["text"].encode("utf-8"), None, ctx.line(path))
        got = _read(ctx, base, value["file"], f"{path}.file")
        if got is None:
            return None
        return Part("system", "system", value["file"], got[1], got[0], 1)
    ctx.err(path, "expected a string or {file: PATH} / {text: TEXT}")
    return None


def tool_part(ctx: RecipeContext, base: Path, value: Any, path: str, i: int) -> Part | None:
    label = f"tool[{i}]"
    if isinstance(value, dict):
        check_keys(ctx, value, ("file", "inline"), path)
        if ("file" in value) == ("inline" in value):
            ctx.err(path, "give exactly one of file or inline")
            return None
        if "inline" in value:
            if not isinstance(value["inline"], dict):
                ctx.err(f"{path}.inline", "expected a mapping (the tool schema)")
                return None
            data = json.dumps(value["inline"], ensure_ascii=False, separators=(",", ":")).encode()
            return Part("tool", label, "inline", data, None, ctx.line(path))
        value = value["file"]
        path = f"{path}.file"
    if not isinstance(value, str):
        ctx.err(path, "expected a file path or {file: PATH} / {inline: {...}}")
        return None
    got = _read(ctx, base, value, path)
    if got is None:
        return None
    p, data = got
    if p.suffix.lower() == ".json":
        try:
            json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            ctx.err(path, f"invalid JSON in {value}: {exc}")
            return None
    elif p.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            obj = yamlsafe.load(data)
        except yaml.YAMLError as exc:
            ctx.err(path, f"invalid YAML in {value}: {exc}")
            return None
        if not isinstance(obj, dict):
            ctx.err(path, f"{value}: a tool schema must be a mapping")
            return None
    return Part("tool", label, value, data, p, 1)


def document_parts(ctx: RecipeContext, base: Path, value: Any, path: str, start_index: int) -> list[Part]:
    spec: dict[str, Any]
    if isinstance(value, str):
        spec = {"glob" if any(c in value for c in "*?[") else "file": value}
    elif isinstance(value, dict):
        spec = value
        check_keys(ctx, spec, ("file", "glob", "chunk", "max_chars"), path)
    else:
        ctx.err(path, "expected a path, a glob or {file|glob: ..., chunk: ..., max_chars: N}")
        return []
    if ("file" in spec) == ("glob" in spec):
        ctx.err(path, "give exactly one of file or glob")
        return []
    chunk = spec.get("chunk", "none")
    if chunk not in CHUNK_MODES:
        ctx.err(f"{path}.chunk", f"unknown chunk mode {chunk!r} (allowed: {', '.join(CHUNK_MODES)})")
        return []
    max_chars = spec.get("max_chars")
    if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1):
        ctx.err(f"{path}.max_chars", "expected a positive integer")
        return []
    files: list[tuple[str, Path]] = []
    if "file" in spec:
        got = _read(ctx, base, spec["file"], f"{path}.file")
        if got is None:
            return []
        files.append((spec["file"], got[0]))
    else:
        pattern = spec["glob"]
        if not isinstance(pattern, str) or not pattern.strip() or Path(pattern).is_absolute():
            ctx.err(f"{path}.glob", "expected a relative glob pattern")
            return []
        try:
            matches = sorted((p for p in base.glob(pattern) if p.is_file()), key=lambda p: p.as_posix())
        except (ValueError, OSError) as exc:  # e.g. "parts/**.md": ** must be a whole path segment
            ctx.err(f"{path}.glob", f"invalid glob {pattern!r}: {exc}")
            return []
        if not matches:
            ctx.err(f"{path}.glob", f"no files match {pattern}")
            return []
        outside = [p for p in matches if not p.resolve().is_relative_to(ctx.root)]
        if outside:
            _confined(ctx, outside[0].resolve(), outside[0].relative_to(base).as_posix(), f"{path}.glob")
            return []
        files.extend((p.relative_to(base).as_posix(), p.resolve()) for p in matches)
    parts: list[Part] = []
    for rel, p in files:
        try:
            data = p.read_bytes()
        except OSError as exc:
            ctx.err(path, f"{rel}: cannot read: {exc.strerror or exc}")
            return []
        if chunk == "none" and not max_chars:
            parts.append(Part("document", f"document[{start_index + len(parts)}]", rel, data, p, 1))
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            ctx.err(path, f"{rel}: not UTF-8 text, cannot chunk (use chunk: none)")
            return []
        pieces = chunk_text(text, chunk, max_chars)
        line, prev = 1, 0  # running line number: counting from the start for every chunk was quadratic
        for k, (off, piece) in enumerate(pieces):
            line += text.count("\n", prev, off)
            prev = off
            parts.append(
                Part(
                    "document",
                    f"document[{start_index + len(parts)}]",
                    f"{rel}#chunk{k}",
                    piece.encode("utf-8"),
                    p,
                    line,
                )
            )
    return parts
