"""``tiktoken:NAME`` — OpenAI encodings with a documented, APPROXIMATE chat rendering.

Hosted APIs do not publish how they render messages and tools into tokens, so this backend
renders a request in a fixed, documented layout (docs/analyze.md, "tiktoken rendering") that
follows the hosted caching order — tools, then system, then messages:

    # Tools\\n                     (template, only when tools are present)
    {tool JSON}\\n                 (one ``tool`` segment per tool, as logged, ensure_ascii=False)
    <|im_start|>{role}\\n          (template; encoded as ordinary text)
    {content}                     (the message's segment)
    <|im_end|>\\n                  (template)
    <|im_start|>assistant\\n       (template, generation prompt)

Each piece is encoded on its own with ``encode_ordinary`` (user text containing special-token
strings is plain text), each distinct piece once; a piece not seen before is cut where the
encoding's proved rule allows (:mod:`prefixplan.render.boundaries`: cl100k and o200k) and its
known prefix and lines are reused (``incremental=False`` or ``PREFIXPLAN_INCREMENTAL=0``: whole
pieces only). Every figure from this backend is labelled approximate.

Rank files are read locally: ``tiktoken:cl100k_base`` looks for ``cl100k_base.tiktoken`` in
``$PREFIXPLAN_TOKENIZER_DIR/tiktoken``, ``./.cache/tokenizers/tiktoken`` and
``~/.cache/prefixplan/tokenizers/tiktoken`` (``scripts/fetch_tokenizers.py tiktoken`` puts them
there, sha256-pinned); ``tiktoken:/path/to/file.tiktoken`` names a file directly.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prefixplan.core.hashes import segment_hash
from prefixplan.core.types import Prompt, Request, Segment, TokenIds, as_token_ids
from prefixplan.errors import TokenizerError
from prefixplan.render.boundaries import rule_for_patterns
from prefixplan.render.engine_ids import raw_ids_prompt
from prefixplan.render.incremental import EncodeStats, SegmentEncoder
from prefixplan.render.pieces import PieceCache
from prefixplan.render.spans import ROLE_KIND, message_text, tool_name

KNOWN = ("cl100k_base", "o200k_base", "p50k_base", "r50k_base")


def tokenizer_dirs() -> list[Path]:
    dirs = []
    env = os.environ.get("PREFIXPLAN_TOKENIZER_DIR")
    if env:
        dirs.append(Path(env))
    dirs.append(Path.cwd() / ".cache" / "tokenizers")
    dirs.append(Path.home() / ".cache" / "prefixplan" / "tokenizers")
    return dirs


def tiktoken_cache_file(name: str) -> Path | None:
    """Where tiktoken's own cache keeps ``name``'s rank file (``$TIKTOKEN_CACHE_DIR``, else
    ``$DATA_GYM_CACHE_DIR``, else ``<tmp>/data-gym-cache``; the file is named by the sha1 of the
    download URL), or None for a name that is not one of OpenAI's encodings."""
    if name not in KNOWN:
        return None
    env = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if env is None:
        import tempfile

        env = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    url = f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
    return Path(env) / hashlib.sha1(url.encode()).hexdigest()


def _find_rank_file(name: str) -> Path:
    direct = Path(name)
    if direct.suffix == ".tiktoken" and direct.is_file():
        return direct
    for d in tokenizer_dirs():
        path = d / "tiktoken" / f"{name}.tiktoken"
        if path.is_file():
            return path
    cached = tiktoken_cache_file(name)
    if cached is not None and cached.is_file():
        return cached
    raise TokenizerError(
        f"tiktoken:{name}: rank file {name}.tiktoken not found in "
        + ", ".join(str(d / "tiktoken") for d in tokenizer_dirs())
        + (f" nor in tiktoken's cache ({cached})" if cached is not None else ""),
        hint="run `python scripts/fetch_tokenizers.py tiktoken`, set PREFIXPLAN_TOKENIZER_DIR, point "
        "TIKTOKEN_CACHE_DIR at a cache tiktoken filled, or pass tiktoken:/path/to/NAME.tiktoken",
    )


def read_ranks(path: Path) -> dict[bytes, int]:
    """Parse a .tiktoken rank file (one `base64-token rank` pair per line).

    Read here rather than through tiktoken.load, which (before 0.8) needs the optional
    blobfile package to open a local path.
    """
    import base64
    import binascii

    ranks: dict[bytes, int] = {}
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error) as e:
            raise TokenizerError(f"{path}:{n}: not a tiktoken rank line ({e})") from None
    return ranks


def load_encoding(name: str) -> tuple[Any, Path]:
    """Build a tiktoken Encoding from a local rank file, with tiktoken's own pattern/specials."""
    import tiktoken
    import tiktoken_ext.openai_public as public

    path = _find_rank_file(name)
    base = path.stem if path.stem in KNOWN else Path(name).stem
    ranks = read_ranks(path)
    ctor = getattr(public, base, None)
    if ctor is None:
        raise TokenizerError(f"tiktoken:{name}: unknown encoding; choose one of {', '.join(KNOWN)}")
    original = public.load_tiktoken_bpe
    public.load_tiktoken_bpe = lambda *a, **k: ranks
    try:
        params = ctor()
    finally:
        public.load_tiktoken_bpe = original
    return tiktoken.Encoding(**params), path


class TiktokenRenderer:
    exact = False

    def __init__(self, name: str = "o200k_base", *, incremental: bool | None = None) -> None:
        self.encoding, path = load_encoding(name)
        self.spec = f"tiktoken:{name}"
        self.label = f"tiktoken:{self.encoding.name} (approximate rendering)"
        h = hashlib.sha256(path.read_bytes())
        h.update(b"\0layout:pp-chatml-1")
        self.fingerprint = "tok1:" + h.hexdigest()[:32]
        self.cache = PieceCache(4_000_000)
        self.stats = EncodeStats()
        if incremental is None:
            incremental = os.environ.get("PREFIXPLAN_INCREMENTAL", "1") != "0"
        self.segments = (
            SegmentEncoder(self._encode_batch, rule_for_patterns([self.encoding._pat_str]), self.cache, starts=False)
            if incremental
            else None
        )
        self._reused = False

    def encode_stats(self) -> dict[str, int]:
        """Chat requests rendered so far whose ids reused an earlier encode (``incremental``)
        and those encoded entirely for themselves (``full``)."""
        return self.stats.as_dict()

    def _encode_batch(self, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        empty = np.zeros(0, np.int64)
        return [(as_token_ids(self.encoding.encode_ordinary(text)), empty) for text in texts]

    def _enc(self, text: str) -> TokenIds:
        """The ids of one part of the layout, reused when encoded before (whole, or with the
        incremental path, by proved prefix and line)."""
        if self.segments is not None:
            (ids, _), reused = self.segments.encode(text)
            self._reused = self._reused or reused
            return TokenIds(ids)
        item = self.cache.get(text)
        if item is None:
            ids = as_token_ids(self.encoding.encode_ordinary(text))
            item = (ids, np.zeros(0, np.int64))
            self.cache.put(text, item)
        else:
            self._reused = True
        return TokenIds(item[0])

    def encode_text(self, text: str, *, add_special_tokens: bool = False) -> tuple[np.ndarray, np.ndarray]:
        ids = as_token_ids(self.encoding.encode_ordinary(text))
        return ids, np.zeros(len(ids), np.int64)

    def render(self, request: Request) -> Prompt:
        if request.messages is None:
            if request.prompt is not None:
                self._reused = False
                tokens = self._enc(request.prompt)
                self.stats.count(self._reused)
                return Prompt(
                    request, tokens, (Segment("raw", 0, len(tokens), segment_hash(request.prompt)),), exact=False
                )
            return raw_ids_prompt(request)
        parts: list[tuple[str, str, int, str | None]] = []  # (kind, text, index, name)
        self._reused = False
        if request.tools:
            parts.append(("template", "# Tools\n", 0, None))
            for j, tool in enumerate(request.tools):
                parts.append(("tool", json.dumps(tool, ensure_ascii=False) + "\n", j, tool_name(tool)))
        for i, msg in enumerate(request.messages):
            role = str(msg.get("role"))
            parts.append(("template", f"<|im_start|>{role}\n", i, None))
            text = message_text(msg.get("content"))
            for call in msg.get("tool_calls") or ():
                text += "\n" + json.dumps(call, ensure_ascii=False)
            if text:
                parts.append((ROLE_KIND.get(role, "user"), text, i, None))
            parts.append(("template", "<|im_end|>\n", i, None))
        parts.append(("template", "<|im_start|>assistant\n", len(request.messages), None))
        arrays, segments, pos = [], [], 0
        for kind, text, index, name in parts:
            ids = self._enc(text)
            if len(ids) == 0:
                continue
            arrays.append(ids)
            segments.append(Segment(kind, pos, pos + len(ids), segment_hash(text), index, name))
            pos += len(ids)
        tokens = as_token_ids(np.concatenate(arrays)) if arrays else as_token_ids(np.zeros(0, np.uint32))
        self.stats.count(self._reused)
        return Prompt(request, tokens, tuple(_merge_template(segments)), (), exact=False)

    def render_many(self, requests: Sequence[Request]) -> list[Prompt]:
        return [self.render(r) for r in requests]


def _merge_template(segments: list[Segment]) -> list[Segment]:
    out: list[Segment] = []
    for seg in segments:
        if out and seg.kind == "template" and out[-1].kind == "template":
            prev = out[-1]
            out[-1] = Segment("template", prev.start, seg.end, segment_hash(prev.text_hash + seg.text_hash), prev.index)
        else:
            out.append(seg)
    return out


def from_spec(spec: str, rest: str) -> TiktokenRenderer:
    """``tiktoken:NAME`` (default ``o200k_base``)."""
    return TiktokenRenderer(rest or "o200k_base")
