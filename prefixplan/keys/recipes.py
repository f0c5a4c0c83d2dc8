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

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixplan.errors import RecipeError
from prefixplan.keys import DEFAULT_RETAIN_SECONDS, NAME_RE, CacheKey, content_hash, part_hash

RENDER_MODES = ("chat", "completion")
CHUNK_MODES = ("none", "blank-lines", "headings")

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


# -- YAML with line numbers ------------------------------------------------------------------


def _line_map(text: str, where: str) -> dict[str, int]:
    """Field path -> 1-based line, and duplicate-key detection, from the YAML node tree."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
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


class _Ctx:
    """Collects field-path errors of one recipe file."""

    def __init__(self, file: Path, lines: dict[str, int]) -> None:
        self.file = file
        self.where = display_path(file)
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


# -- field parsers -------------------------------------------------------------------------


def parse_duration(value: Any) -> int:
    """Seconds from ``7d`` / ``36h`` / ``90m`` / ``3600s`` / ``2w`` / an int; ValueError otherwise."""
    from prefixplan.core.durations import parse_seconds

    seconds = parse_seconds(value)
    if seconds != int(seconds):
        raise ValueError(f"invalid duration {value!r}: retention is whole seconds")
    return int(seconds)


def chunk_text(text: str, by: str = "none", max_chars: int | None = None) -> list[tuple[int, str]]:
    """Split ``text`` into ``(start offset, chunk)`` pieces whose concatenation is ``text``.

    ``by="blank-lines"`` starts a chunk at each line that follows a blank line;
    ``by="headings"`` at each Markdown heading line (``#``..``######``, outside code
    fences); ``max_chars`` then splits longer chunks at the last newline within the limit
    (or hard at the limit). Chunks are exact slices, so hashing them loses nothing.
    """
    if by not in CHUNK_MODES:
        raise ValueError(f"unknown chunk mode {by!r}")
    starts = [0]
    if by != "none" and text:
        offset = 0
        prev_blank = False
        in_fence = False
        for line in text.splitlines(keepends=True):
            stripped = line.strip()
            if by == "blank-lines":
                if stripped and prev_blank and offset > 0:
                    starts.append(offset)
                prev_blank = not stripped
            else:
                if stripped.startswith(("```", "~~~")):
                    in_fence = not in_fence
                elif not in_fence and re.match(r"#{1,6}(\s|$)", line) and offset > 0:
                    starts.append(offset)
            offset += len(line)
    bounds = starts + [len(text)]
    pieces = [(bounds[i], text[bounds[i] : bounds[i + 1]]) for i in range(len(starts))]
    if max_chars:
        split: list[tuple[int, str]] = []
        for start, piece in pieces:
            while len(piece) > max_chars:
                cut = piece.rfind("\n", 0, max_chars) + 1
                if cut <= 0:
                    cut = max_chars
                split.append((start, piece[:cut]))
                start, piece = start + cut, piece[cut:]
            split.append((start, piece))
        pieces = split
    return [(s, p) for s, p in pieces if p] or [(0, text)]


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _read(ctx: _Ctx, base: Path, rel: Any, path: str) -> tuple[Path, bytes] | None:
    if not isinstance(rel, str) or not rel.strip():
        ctx.err(path, "expected a file path")
        return None
    p = (base / rel).resolve() if not Path(rel).is_absolute() else Path(rel)
    if not p.is_file():
        ctx.err(path, f"file not found: {rel}")
        return None
    try:
        return p, p.read_bytes()
    except OSError as exc:
        ctx.err(path, f"cannot read {rel}: {exc.strerror}")
        return None


def _check_keys(ctx: _Ctx, obj: dict[str, Any], allowed: Iterable[str], path: str) -> None:
    allowed = tuple(allowed)
    for k in obj:
        if k not in allowed:
            ctx.err(f"{path}.{k}", f"unknown field (allowed: {', '.join(allowed)})")


def _system_part(ctx: _Ctx, base: Path, value: Any, path: str) -> Part | None:
    if isinstance(value, str):
        return Part("system", "system", "inline", value.encode("utf-8"), None, ctx.line(path))
    if isinstance(value, dict):
        _check_keys(ctx, value, ("file", "text"), path)
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


def _tool_part(ctx: _Ctx, base: Path, value: Any, path: str, i: int) -> Part | None:
    label = f"tool[{i}]"
    if isinstance(value, dict):
        _check_keys(ctx, value, ("file", "inline"), path)
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
            obj = yaml.safe_load(data)
        except yaml.YAMLError as exc:
            ctx.err(path, f"invalid YAML in {value}: {exc}")
            return None
        if not isinstance(obj, dict):
            ctx.err(path, f"{value}: a tool schema must be a mapping")
            return None
    return Part("tool", label, value, data, p, 1)


def _document_parts(ctx: _Ctx, base: Path, value: Any, path: str, start_index: int) -> list[Part]:
    spec: dict[str, Any]
    if isinstance(value, str):
        spec = {"glob" if any(c in value for c in "*?[") else "file": value}
    elif isinstance(value, dict):
        spec = value
        _check_keys(ctx, spec, ("file", "glob", "chunk", "max_chars"), path)
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
        matches = sorted((p for p in base.glob(pattern) if p.is_file()), key=lambda p: p.as_posix())
        if not matches:
            ctx.err(f"{path}.glob", f"no files match {pattern}")
            return []
        files.extend((p.relative_to(base).as_posix(), p.resolve()) for p in matches)
    parts: list[Part] = []
    for rel, p in files:
        data = p.read_bytes()
        if chunk == "none" and not max_chars:
            parts.append(Part("document", f"document[{start_index + len(parts)}]", rel, data, p, 1))
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            ctx.err(path, f"{rel}: not UTF-8 text, cannot chunk (use chunk: none)")
            return []
        pieces = chunk_text(text, chunk, max_chars)
        for k, (off, piece) in enumerate(pieces):
            parts.append(
                Part(
                    "document",
                    f"document[{start_index + len(parts)}]",
                    f"{rel}#chunk{k}",
                    piece.encode("utf-8"),
                    p,
                    _line_of(text, off),
                )
            )
    return parts


def _parse_prefix(ctx: _Ctx, base: Path, entry: Any, index: int) -> Recipe | None:
    path = f"prefixes[{index}]"
    if not isinstance(entry, dict):
        ctx.err(path, "expected a mapping with name, version and parts")
        return None
    n_errors = len(ctx.errors)
    _check_keys(ctx, entry, _PREFIX_FIELDS, path)
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        ctx.err(f"{path}.name", "required: letters, digits, '.', '_' or '-' (start with a letter or digit)")
    version = entry.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        ctx.err(f"{path}.version", "required: an integer >= 1")
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
            _check_keys(ctx, lint, ("ignore",), f"{path}.lint")
            ign = lint.get("ignore", [])
            if not isinstance(ign, list) or not all(isinstance(x, str) for x in ign):
                ctx.err(f"{path}.lint.ignore", "expected a list of lint codes")
            else:
                lint_ignore = tuple(ign)
    parts: list[Part] = []
    if "system" in entry:
        sp = _system_part(ctx, base, entry["system"], f"{path}.system")
        if sp:
            parts.append(sp)
    tools = entry.get("tools", [])
    if not isinstance(tools, list):
        ctx.err(f"{path}.tools", "expected a list")
        tools = []
    for i, t in enumerate(tools):
        tp = _tool_part(ctx, base, t, f"{path}.tools[{i}]", i)
        if tp:
            parts.append(tp)
    docs = entry.get("documents", [])
    if not isinstance(docs, list):
        ctx.err(f"{path}.documents", "expected a list")
        docs = []
    n_docs = 0
    for i, d in enumerate(docs):
        dps = _document_parts(ctx, base, d, f"{path}.documents[{i}]", n_docs)
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
    lines = _line_map(text, where)
    ctx = _Ctx(file, lines)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:  # pragma: no cover - compose already caught it
        raise RecipeError(f"{where}: invalid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise RecipeError(f"{where}: expected a mapping with a 'prefixes' list")
    _check_keys(ctx, doc, ("prefixes",), "")
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
