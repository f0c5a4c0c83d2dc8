"""Recipes: declared prefixes in ``recipes/*.yaml`` (see docs/keys.md for the format).

A recipe file holds ``prefixes:``, a list of entries::

    prefixes:
      - name: support-bot          # key name (letters, digits, . _ -)
        version: 3                 # the N of name@vN; bump it whenever content changes
        retain: 7d                 # how long a superseded version stays valid (s/m/h/d/w or seconds)
        pin: true                  # warm hint: keep this prefix resident
        model: Qwen/Qwen3-8B       # model namespace (optional)
        tokenizer: hf:path         # tokenizer spec for token hashes (optional)
        render: chat               # chat | completion
        system: {file: parts/support/system.md}   # or an inline string, or {text: ...}
        tools:                     # JSON/YAML schema files (exact bytes), or {inline: {...}}
          - parts/support/tools/lookup_order.json
        documents:                 # files or globs, optionally chunked
          - {glob: "parts/manual/*.md", chunk: headings, max_chars: 1500}
        lint: {ignore: [long-number]}

Paths are relative to the recipe file. The parts of a prefix are, in order: the system
text, each tool, each document chunk; the key's content hash covers their exact bytes
(:func:`prefixplan.keys.content_hash`). Every problem is reported with the file and the
field path, e.g. ``recipes/agent.yaml: prefixes[0].tools[2]: file not found``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefixplan.core import yamlsafe
from prefixplan.errors import RecipeError
from prefixplan.keys import DEFAULT_RETAIN_SECONDS, MAX_VERSION, NAME_RE
from prefixplan.keys.recipe_model import RENDER_MODES, Part, Recipe, display_path
from prefixplan.keys.recipe_parts import check_keys, document_parts, parse_duration, system_part, tool_part
from prefixplan.keys.recipe_yaml import RecipeContext, RecipeProblem, line_map

__all__ = ["load_recipes", "parse_recipe_text", "recipe_files"]

_PREFIX_FIELDS = (
    "name",
    "version",
    "description",
    "retain",
    "pin",
    "model",
    "tokenizer",
    "render",
    "system",
    "tools",
    "documents",
    "lint",
)


def _parse_prefix(ctx: RecipeContext, base: Path, entry: Any, index: int) -> Recipe | None:
    path = f"prefixes[{index}]"
    if not isinstance(entry, dict):
        ctx.err(path, "expected a mapping with name, version and parts")
        return None
    n_errors = len(ctx.errors)
    check_keys(ctx, entry, _PREFIX_FIELDS, path)
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        ctx.err(f"{path}.name", "required: letters, digits, '.', '_' or '-' (start with a letter or digit)")
    version = entry.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        ctx.err(
            f"{path}.version", f"required: an integer from 1 to {MAX_VERSION} (a key is name@vN, N of up to 9 digits)"
        )
    try:
        retain = parse_duration(entry.get("retain", DEFAULT_RETAIN_SECONDS))
    except ValueError as exc:
        ctx.err(f"{path}.retain", str(exc))
        retain = DEFAULT_RETAIN_SECONDS
    pin = entry.get("pin", False)
    if not isinstance(pin, bool):
        ctx.err(f"{path}.pin", "expected true or false")
    for opt in ("model", "tokenizer", "description"):
        if entry.get(opt) is not None and not isinstance(entry.get(opt), str):
            ctx.err(f"{path}.{opt}", "expected a string")
    render = entry.get("render", "chat")
    if render not in RENDER_MODES:
        ctx.err(f"{path}.render", f"expected one of {', '.join(RENDER_MODES)}")
    lint_ignore: tuple[str, ...] = ()
    lint = entry.get("lint")
    if lint is not None:
        if not isinstance(lint, dict):
            ctx.err(f"{path}.lint", "expected a mapping {ignore: [codes]}")
        else:
            check_keys(ctx, lint, ("ignore",), f"{path}.lint")
            ign = lint.get("ignore", [])
            if not isinstance(ign, list) or not all(isinstance(x, str) for x in ign):
                ctx.err(f"{path}.lint.ignore", "expected a list of lint codes")
            else:
                lint_ignore = tuple(ign)
    parts: list[Part] = []
    if "system" in entry:
        sp = system_part(ctx, base, entry["system"], f"{path}.system")
        if sp:
            parts.append(sp)
    tools = entry.get("tools", [])
    if not isinstance(tools, list):
        ctx.err(f"{path}.tools", "expected a list")
        tools = []
    for i, t in enumerate(tools):
        tp = tool_part(ctx, base, t, f"{path}.tools[{i}]", i)
        if tp:
            parts.append(tp)
    docs = entry.get("documents", [])
    if not isinstance(docs, list):
        ctx.err(f"{path}.documents", "expected a list")
        docs = []
    n_docs = 0
    for i, d in enumerate(docs):
        dps = document_parts(ctx, base, d, f"{path}.documents[{i}]", n_docs)
        n_docs += len(dps)
        parts.extend(dps)
    if not ("system" in entry or tools or docs):
        ctx.err(path, "a prefix needs at least one of system, tools, documents")
    if len(ctx.errors) > n_errors:
        return None
    assert isinstance(name, str) and isinstance(version, int)  # validated above
    return Recipe(
        name=name,
        version=version,
        retain=retain,
        pin=pin,
        model=entry.get("model"),
        tokenizer=entry.get("tokenizer"),
        render=render,
        parts=tuple(parts),
        file=ctx.file,
        index=index,
        line=ctx.line(path),
        description=entry.get("description"),
        lint_ignore=lint_ignore,
    )


def parse_recipe_text(text: str, file: Path) -> list[Recipe]:
    """Parse one recipe file's text (``file`` locates relative paths and names errors)."""
    import yaml

    file = Path(file)
    where = display_path(file)
    lines = line_map(text, where)
    ctx = RecipeContext(file, lines)
    try:
        doc = yamlsafe.load(text)
    except yaml.YAMLError as exc:  # pragma: no cover - compose already caught it
        raise RecipeError(f"{where}: invalid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise RecipeError(f"{where}: expected a mapping with a 'prefixes' list")
    check_keys(ctx, doc, ("prefixes",), "")
    ctx.errors = [(p.lstrip("."), m) for p, m in ctx.errors]
    prefixes = doc.get("prefixes")
    if not isinstance(prefixes, list) or not prefixes:
        ctx.err("prefixes", "required: a non-empty list of prefixes")
        ctx.raise_if_any()
    recipes = []
    for i, entry in enumerate(prefixes or []):
        r = _parse_prefix(ctx, file.parent, entry, i)
        if r:
            recipes.append(r)
    ctx.raise_if_any()
    return recipes


def recipe_files(paths_or_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The recipe files named by a directory (its ``*.yaml``/``*.yml``, not recursive) or paths."""
    items = [paths_or_dir] if isinstance(paths_or_dir, (str, os.PathLike)) else list(paths_or_dir)
    files: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            files.extend(sorted(q for q in p.iterdir() if q.suffix in (".yaml", ".yml") and q.is_file()))
        elif p.is_file():
            files.append(p)
        else:
            raise RecipeError(f"{display_path(p)}: no such recipe file or directory")
    return files


def load_recipes(paths_or_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Recipe]:
    """Load and strictly validate recipes; sorted by name.

    Raises:
        RecipeError: with ``file: field.path: problem`` lines for every problem found.
    """
    recipes: list[Recipe] = []
    problems: list[RecipeProblem] = []
    for f in recipe_files(paths_or_dir):
        try:
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(RecipeProblem(display_path(f), "", f"cannot read: {exc}", 1))
            continue
        try:
            recipes.extend(parse_recipe_text(text, f))
        except RecipeError as exc:
            problems.extend(
                getattr(exc, "errors", None) or [RecipeProblem(display_path(f), "", _strip_where(str(exc), f), 1)]
            )
    seen: dict[str, Recipe] = {}
    for r in recipes:
        if r.name in seen:
            o = seen[r.name]
            problems.append(
                RecipeProblem(
                    display_path(r.file),
                    f"{r.field_path}.name",
                    f"duplicate name {r.name!r} (also {display_path(o.file)}: {o.field_path})",
                    r.line,
                )
            )
        seen[r.name] = r
    if problems:
        err = RecipeError("\n".join(map(str, problems)))
        err.errors = problems  # type: ignore[attr-defined]
        raise err
    return sorted(recipes, key=lambda r: r.name)


def _strip_where(message: str, file: Path) -> str:
    where = display_path(file) + ": "
    return message[len(where) :] if message.startswith(where) else message
