"""Recipe YAML with line numbers: field paths mapped to lines, duplicate keys refused, and the
problem collector that names file, field path and line for every error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixplan.core import yamlsafe
from prefixplan.errors import RecipeError
from prefixplan.keys.recipe_model import display_path


def line_map(text: str, where: str) -> dict[str, int]:
    """Field path -> 1-based line, and duplicate-key detection, from the YAML node tree."""
    import yaml

    try:
        root = yamlsafe.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        err = RecipeError(f"{where}: invalid YAML (line {line}): {getattr(exc, 'problem', None) or exc}")
        err.errors = [RecipeProblem(where, "", f"invalid YAML: {getattr(exc, 'problem', None) or exc}", line)]  # type: ignore[attr-defined]
        raise err from exc
    lines: dict[str, int] = {}

    def walk(node: Any, path: str) -> None:
        lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for k, v in node.value:
                key = str(k.value)
                sub = f"{path}.{key}" if path else key
                if key in seen:
                    err = RecipeError(f"{where}: {sub}: duplicate key")
                    err.errors = [RecipeProblem(where, sub, "duplicate key", k.start_mark.line + 1)]  # type: ignore[attr-defined]
                    raise err
                seen.add(key)
                lines[sub] = k.start_mark.line + 1
                walk(v, sub)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, f"{path}[{i}]")

    if root is not None:
        walk(root, "")
    return lines


def confinement_root(recipe_file: Path) -> Path:
    """The directory a recipe's parts must live under: the enclosing git repository's root (the
    nearest ancestor holding ``.git``), else the recipe file's own directory. Symlinks resolved."""
    here = Path(recipe_file).resolve().parent
    for d in (here, *here.parents):
        if (d / ".git").exists():
            return d
    return here


_PARENT = re.compile(r"(\.[^.\[]+|\[\d+\])$")


@dataclass(frozen=True, slots=True)
class RecipeProblem:
    """One validation problem: file (as displayed), field path, message, line."""

    file: str
    field: str
    message: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}" if self.field else f"{self.file}: {self.message}"


class RecipeContext:
    """Collects field-path errors of one recipe file."""

    def __init__(self, file: Path, lines: dict[str, int]) -> None:
        self.file = file
        self.where = display_path(file)
        self.root = confinement_root(file)
        self.lines = lines
        self.errors: list[tuple[str, str]] = []

    def err(self, path: str, message: str) -> None:
        self.errors.append((path, message))

    def line(self, path: str) -> int:
        """Line of ``path``, or of its nearest enclosing field."""
        while path:
            if path in self.lines:
                return self.lines[path]
            parent = _PARENT.sub("", path)
            path = parent if parent != path else ""
        return self.lines.get("", 1)

    def raise_if_any(self) -> None:
        if self.errors:
            err = RecipeError("\n".join(f"{self.where}: {p}: {m}" for p, m in self.errors))
            err.errors = [  # type: ignore[attr-defined]
                RecipeProblem(self.where, p, m, self.line(p)) for p, m in self.errors
            ]
            raise err
