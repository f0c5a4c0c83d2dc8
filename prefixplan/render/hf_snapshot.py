"""What transformers loads for an ``hf:`` tokenizer folder, kept on disk for the next run.

Loading a tokenizer through transformers costs about 1.7 s of CPU per process (importing
transformers, then ``AutoTokenizer.from_pretrained``), paid by every command and every render
worker. transformers may also change the tokenizer it loads (transformers 5 rebuilds the
pre-tokenizer and decoder of a Qwen tokenizer, for instance), so reading ``tokenizer.json``
alone would not be the same tokenizer.

The first load of a folder therefore goes through transformers and keeps what it built: the
tokenizer as transformers serialises it (``backend_tokenizer.to_str()``), the chat template(s),
the special tokens the template sees and the encoder's table of bytes per token. Later loads read that file and rebuild the same
tokenizer with ``tokenizers`` alone; the template is rendered by
:mod:`prefixplan.render.hf_template`. A snapshot is only used where its template rendering
agrees with transformers': when it is made, a few probe conversations (tools, tool calls,
reasoning fields, keys set to null) are rendered both ways, with each of the message handlings
transformers versions differ in (:class:`~prefixplan.render.hf_template.Semantics`), and the
first that agrees on every probe is kept; when none does, the folder stays on transformers.

A snapshot is named by the folder, its tokenizer files' names, sizes, modification times and
inodes, and the versions of transformers, tokenizers and jinja2, so a changed file or an upgrade
makes a new one. The
files live in ``$PREFIXPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/prefixplan``, else
``~/.cache/prefixplan`` (folder ``tokenizers/``); they hold tokenizer data only, are written
whole (:func:`~prefixplan.core.fileio.atomic_write_bytes`), and one that cannot be read is made
again. Where the folder cannot be written, nothing is kept and each run loads through
transformers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import astuple, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from prefixplan.core.fileio import atomic_write_bytes
from prefixplan.errors import UsageError
from prefixplan.render.hf_encode import byte_lengths
from prefixplan.render.hf_template import ChatTemplate, Semantics, plain, semantics_available, variants

FORMAT = 2
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)
"""The files of a folder transformers reads for a tokenizer (and ``additional_chat_templates/``)."""

PROBES: tuple[tuple[list[dict[str, Any]], list[dict[str, Any]] | None], ...] = (
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}], None),
    (
        [{"role": "user", "content": "Weather in Paris?"}],
        [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ],
    ),
    (
        [
            {"role": "user", "content": "Weather in Paris?", "name": None},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "Call the tool.",
                "tool_calls": [
                    {"type": "function", "id": "c1", "function": {"name": "get_weather", "arguments": {"city": "P"}}}
                ],
            },
            {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
            {"role": "assistant", "content": "Sunny.", "reasoning": "It said so.", "tool_calls": None},
            {"role": "user", "content": "Thanks ✓"},
        ],
        None,
    ),
    (
        [
            {"role": "user", "content": "Weather in Rome?"},
            {
                "role": "assistant",
                "content": "",
                "reasoning": "Ask the tool.",
                "tool_calls": [
                    {"type": "function", "id": "c2", "function": {"name": "get_weather", "arguments": {"city": "R"}}}
                ],
            },
            {"role": "tool", "content": "rain", "tool_call_id": "c2", "name": None},
        ],
        None,
    ),
)
"""Conversations rendered by transformers and by :class:`ChatTemplate` when a snapshot is made."""


def cache_dir() -> Path:
    """Where snapshots are kept (module docstring)."""
    named = os.environ.get("PREFIXPLAN_CACHE_DIR")
    if named:
        return Path(named)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "prefixplan"


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "-"


def folder_digest(folder: Path) -> str:
    """A digest of the tokenizer files of ``folder``: the folder, and each file's name, size,
    modification time and inode (as Python's own bytecode cache tells a changed source, without
    reading it: a file written or replaced changes them)."""
    h = hashlib.sha256()
    h.update(str(folder.resolve()).encode("utf-8", "surrogatepass") + b"\0")
    names = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
    extra = folder / "additional_chat_templates"
    if extra.is_dir():
        names += sorted(f"additional_chat_templates/{p.name}" for p in extra.iterdir() if p.is_file())
    for name in names:
        st = (folder / name).stat()
        h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0".encode())
    return h.hexdigest()


def snapshot_path(folder: Path, chat_template: str | None = None) -> Path:
    """The file of ``folder``'s snapshot for the installed versions (with ``chat_template`` in
    place of the folder's own, when given)."""
    h = hashlib.sha256()
    h.update(f"{FORMAT}\0{folder_digest(folder)}\0".encode())
    if chat_template is not None:
        h.update(b"template\0" + chat_template.encode("utf-8", "surrogatepass") + b"\0")
    for package in ("transformers", "tokenizers", "jinja2"):
        h.update(f"{package}={_version(package)}\0".encode())
    return cache_dir() / "tokenizers" / f"{h.hexdigest()[:40]}.json"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A tokenizer folder as transformers loaded it (module docstring)."""

    backend: str  # the tokenizer's JSON, as transformers serialises it
    chat_template: str | dict[str, str] | None
    special_tokens: dict[str, Any]  # variables the template sees (bos_token, eos_token ...)
    semantics: Semantics | None  # what renders the probes as transformers does; None: nothing does
    byte_lengths: bytes | None = None  # the encoder's table of bytes per token id (int32), if any

    def tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        return Tokenizer.from_str(self.backend)

    def byte_length_table(self) -> np.ndarray | None:
        """The encoder's bytes-per-token table (:func:`~prefixplan.render.hf_encode.byte_lengths`)."""
        if self.byte_lengths is None:
            return None
        return np.frombuffer(self.byte_lengths, dtype="<i4").astype(np.int64)


def read(folder: Path, chat_template: str | None = None) -> Snapshot | None:
    """``folder``'s snapshot, or None (none made yet, another format, or unreadable)."""
    path = snapshot_path(folder, chat_template)
    try:
        data = orjson.loads(path.read_bytes())
        if data.get("format") != FORMAT:
            return None
        template = data["chat_template"]
        if template is not None and not isinstance(template, (str, dict)):
            return None
        table = data.get("byte_lengths")
        found = data["semantics"]
        return Snapshot(
            str(data["backend"]),
            template,
            dict(data["special_tokens"]),
            Semantics(*(bool(x) for x in found)) if found is not None else None,
            base64.b64decode(table, validate=True) if table is not None else None,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, binascii.Error):
        return None


def _outcome(render: Any) -> tuple[str, str]:
    try:
        return "text", str(render())
    except Exception as exc:  # a template that raises must raise both ways
        return "error", type(exc).__name__


def agreeing(tokenizer: Any, template: str | dict[str, str], special_tokens: dict[str, Any]) -> Semantics | None:
    """The first of :func:`~prefixplan.render.hf_template.variants` with which
    :class:`ChatTemplate` renders every probe conversation as ``tokenizer``'s
    ``apply_chat_template`` does (the same text, or an error both ways), or None."""
    if not semantics_available() or not plain(special_tokens):
        return None
    theirs = [
        _outcome(
            lambda m=messages, t=tools: tokenizer.apply_chat_template(
                m, tools=t, add_generation_prompt=True, tokenize=False
            )
        )
        for messages, tools in PROBES
    ]
    for semantics in variants():
        try:
            ours = ChatTemplate(template, special_tokens, semantics)
        except Exception:  # a template that does not compile here
            return None
        if all(
            _outcome(lambda m=messages, t=tools, r=ours: r.render(m, t)) == outcome
            for (messages, tools), outcome in zip(PROBES, theirs, strict=True)
        ):
            return semantics
    return None


def make(folder: Path, tokenizer: Any, chat_template: str | None = None) -> Snapshot:
    """The snapshot of ``folder`` loaded as ``tokenizer`` (transformers; its template replaced
    by ``chat_template`` when given), written to the cache when it can be."""
    template = getattr(tokenizer, "chat_template", None)
    special = dict(getattr(tokenizer, "special_tokens_map", {}) or {})
    fits = template is None or isinstance(template, str) or (isinstance(template, dict) and plain(template))
    table = byte_lengths(tokenizer.backend_tokenizer)
    snap = Snapshot(
        tokenizer.backend_tokenizer.to_str(),
        template if fits else None,
        special,
        agreeing(tokenizer, template, special) if fits and template is not None else None,
        table.astype("<i4").tobytes() if table is not None and int(table.max(initial=0)) < 2**31 else None,
    )
    write(snapshot_path(folder, chat_template), snap)
    return snap


def write(path: Path, snap: Snapshot) -> bool:
    """Write ``snap`` whole to ``path``; False where it cannot be."""
    data = orjson.dumps(
        {
            "format": FORMAT,
            "backend": snap.backend,
            "chat_template": snap.chat_template,
            "special_tokens": snap.special_tokens,
            "semantics": list(astuple(snap.semantics)) if snap.semantics is not None else None,
            "byte_lengths": base64.b64encode(snap.byte_lengths).decode() if snap.byte_lengths is not None else None,
        }
    )
    try:
        atomic_write_bytes(path, data)
    except UsageError:  # a cache folder that cannot be written: nothing is kept
        return False
    return True
