"""A declared prefix as data: :class:`Recipe` and its hashed :class:`Part` records."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from prefixplan.keys import CacheKey, content_hash, part_hash

RENDER_MODES = ("chat", "completion")
CHUNK_MODES = ("none", "blank-lines", "headings")


def display_path(path: Path) -> str:
    """``path`` relative to the current directory when below it, else absolute (posix)."""
    try:
        rel = Path(os.path.relpath(path))
    except ValueError:  # pragma: no cover - different drive on Windows
        return Path(path).as_posix()
    return Path(path).as_posix() if rel.parts[:1] == ("..",) else rel.as_posix()


@dataclass(frozen=True, slots=True)
class Part:
    """One hashed piece of a prefix: a system text, a tool schema or a document chunk.

    ``label`` is unique within the recipe (``system``, ``tool[1]``, ``document[4]``);
    ``source`` says where the bytes came from (a path relative to the recipe file, with
    ``#chunkK`` for chunks, or ``inline``); ``line`` is the 1-based line of ``path`` where
    the bytes start (1 for whole files; the recipe line for inline parts).
    """

    kind: str
    label: str
    source: str
    data: bytes
    path: Path | None = None
    line: int = 1

    @property
    def hash(self) -> str:
        return part_hash(self.data)

    @property
    def ident(self) -> str:
        """``"<label> <source>"``: the part's entry name in the lock file."""
        return f"{self.label} {self.source}"


@dataclass(frozen=True, slots=True)
class Recipe:
    """One declared prefix (``prefixes[index]`` of ``file``)."""

    name: str
    version: int
    retain: int
    pin: bool
    model: str | None
    tokenizer: str | None
    render: str
    parts: tuple[Part, ...]
    file: Path
    index: int
    line: int = 1
    description: str | None = None
    lint_ignore: tuple[str, ...] = field(default=())

    @property
    def key(self) -> CacheKey:
        return CacheKey(self.name, self.version)

    @property
    def content_hash(self) -> str:
        return content_hash([(p.kind, p.data) for p in self.parts])

    @property
    def field_path(self) -> str:
        return f"prefixes[{self.index}]"
