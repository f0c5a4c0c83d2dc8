"""mistral-common's ``encode_chat_completion``, doing less per request, with the same ids.

mistral-common builds a prompt from texts it encodes one by one (the tool list as JSON, each
message's content, the system prompt joined to the last user message by a blank line) with
control tokens (``[INST]``, ``[AVAILABLE_TOOLS]`` ...) between them. :func:`install` keeps that
code as the driver and changes three things on the renderer's own ``MistralTokenizer``:

- its text encoder is a :class:`CachedEncoder`: each text is looked up, then cut where the
  tokenizer family's proved rule allows (:mod:`prefixplan.render.boundaries`; tekken: after a
  line feed before a character that is neither whitespace nor ``/``), and only parts no earlier
  text had are encoded. The system prompt before a new question, the tool list and earlier turns
  are not encoded again. SentencePiece tokenizers (``mistral:v3``, ``v7``) have no proved rule:
  their texts are only looked up whole;
- a tool schema is checked (jsonschema) once per distinct schema, not on every request;
- the decoded prompt text mistral-common attaches to its result is not built (the renderer
  decodes the ids itself, faster).

Each is exact by construction: the same texts reach the same tokenizer (or a proved split of
them), and validation keeps raising for what it rejects. Tests compare the ids with an untouched
``MistralTokenizer`` on generated conversations.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from prefixplan.render.boundaries import rule_for_patterns
from prefixplan.render.incremental import Item, SegmentEncoder
from prefixplan.render.pieces import PieceCache
from prefixplan.render.spans import byte_starts_to_char_starts

_PROBES = ("", "hello world", "a\n\n b", "日本語 ✓", "x" * 300)


class CachedEncoder:
    """Stands in for mistral-common's text tokenizer: ``encode`` reuses earlier encodes
    (module docstring); everything else is the tokenizer's own."""

    def __init__(self, raw: Any, cache_tokens: int = 4_000_000) -> None:
        self._raw = raw
        model = getattr(raw, "_model", None)
        pattern = getattr(model, "_pat_str", None)
        rule = rule_for_patterns([pattern]) if isinstance(pattern, str) else None
        offset = getattr(raw, "num_special_tokens", None)
        self._direct = (
            model if rule is not None and isinstance(offset, int) and self._same_as_raw(model, offset) else None
        )
        self._offset = offset if isinstance(offset, int) else 0
        self.segments = SegmentEncoder(
            self._encode_batch, rule if self._direct is not None else None, PieceCache(cache_tokens), starts=False
        )
        self.reused = False  # set when an encode reused ids
        self.calls: list[tuple[np.ndarray, str]] = []  # (ids, text) of each encode since begin()

    def begin(self) -> None:
        """Start a request: forget the previous one's encodes."""
        self.reused = False
        self.calls = []

    def __getattr__(self, name: str) -> Any:
        raw = self.__dict__.get("_raw")  # absent while unpickling: no recursion through here
        if raw is None:
            raise AttributeError(name)
        return getattr(raw, name)

    def _same_as_raw(self, model: Any, offset: int) -> bool:
        """Whether the tiktoken model plus the special-token offset gives what the tokenizer's
        ``encode`` gives (mistral-common's Tekkenizer does exactly that; checked, not assumed)."""
        try:
            return all(
                [t + offset for t in model.encode(text)] == self._raw.encode(text, bos=False, eos=False)
                for text in _PROBES
            )
        except Exception:  # another shape of tokenizer: encode through it
            return False

    def _encode_batch(self, texts: list[str]) -> list[Item]:
        empty = np.zeros(0, dtype=np.int64)
        out: list[Item] = []
        for text in texts:
            if self._direct is not None:
                ids = np.asarray(self._direct.encode(text), dtype=np.uint32) + np.uint32(self._offset)
            else:
                ids = np.asarray(self._raw.encode(text, bos=False, eos=False), dtype=np.uint32)
            out.append((ids, empty))
        return out

    def encode(self, s: str, bos: bool, eos: bool) -> list[int]:
        (ids, _), reused = self.segments.encode(s)
        self.reused = self.reused or reused
        self.calls.append((ids, s))
        tokens: list[int] = ids.tolist()
        if bos:
            tokens.insert(0, self._raw.bos_id)
        if eos:
            tokens.append(self._raw.eos_id)
        return tokens


class TekkenText:
    """The text of a tekken prompt's ids and each token's first char, built from the texts its
    encodes were given (each run of ordinary tokens between control tokens is checked to be
    exactly one encode's ids, else decoded by the tiktoken model), with token byte lengths
    from a table of the vocabulary."""

    def __init__(self, model: Any, special: int, piece: Any) -> None:
        self._model = model
        self._special = special
        self._piece = piece  # id -> its bytes (control tokens: their names)
        ranks = getattr(model, "_mergeable_ranks", None)
        size = special + (max(ranks.values()) + 1 if isinstance(ranks, dict) and ranks else 0)
        self._lengths = np.full(size, -1, dtype=np.int64)
        if isinstance(ranks, dict):
            for token, rank in ranks.items():
                self._lengths[special + rank] = len(token)

    def lengths(self, ids: np.ndarray) -> np.ndarray:
        if ids.size and int(ids.max()) >= self._lengths.size:
            grown = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
            grown[: self._lengths.size] = self._lengths
            self._lengths = grown
        lens = self._lengths[ids]
        missing = lens < 0
        if missing.any():
            for tid in np.unique(ids[missing]).tolist():
                self._lengths[tid] = len(self._piece(tid))
            lens = self._lengths[ids]
        return lens

    def decode(self, ids: np.ndarray, calls: list[tuple[np.ndarray, str]]) -> tuple[str, np.ndarray]:
        lens = self.lengths(ids)
        bounds = np.flatnonzero(ids < self._special).tolist()
        chunks: list[bytes] = []
        pending = [(c, t) for c, t in calls if c.size]
        j = 0
        pos = 0
        for k in [*bounds, int(ids.size)]:
            if k > pos:
                run = ids[pos:k]
                data = None
                if j < len(pending) and pending[j][0].shape == run.shape and np.array_equal(pending[j][0], run):
                    try:
                        data = pending[j][1].encode("utf-8")
                    except UnicodeEncodeError:  # lone surrogates: the tokenizer saw other text
                        data = None
                    j += 1
                if data is None:
                    data = self._model.decode_bytes((run - self._special).tolist())
                chunks.append(data)
            if k < ids.size:
                chunks.append(self._piece(int(ids[k])))
            pos = k + 1
        data = b"".join(chunks)
        starts = byte_starts_to_char_starts(data, np.cumsum(lens) - lens)
        return data.decode("utf-8", errors="replace"), starts


def _no_text(*_args: Any, **_kwargs: Any) -> str:
    return ""


def _validated_once(original: Any) -> Any:
    """``original`` (a validator's per-function check) run once per distinct function schema;
    a schema it rejects is checked (and raises) every time."""
    passed: set[bytes] = set()

    def check(function: Any) -> None:
        try:
            key = orjson.dumps([function.name, function.parameters])
        except (TypeError, AttributeError):  # not plain data: check it as mistral-common does
            original(function)
            return
        if key in passed:
            return
        original(function)
        if len(passed) > 4096:
            passed.clear()
        passed.add(key)

    return check


def install(tokenizer: Any) -> CachedEncoder | None:
    """Make ``tokenizer`` (a ``MistralTokenizer`` the caller owns) encode incrementally (module
    docstring); None, leaving it unchanged, where its internals have another shape."""
    instruct: Any = getattr(tokenizer, "instruct_tokenizer", None)
    raw = getattr(instruct, "tokenizer", None)
    if instruct is None or raw is None or not callable(getattr(raw, "encode", None)):
        return None
    encoder = CachedEncoder(raw)
    instruct.tokenizer = encoder
    instruct.decode = _no_text
    validator: Any = getattr(tokenizer, "_chat_completion_request_validator", None)
    check = getattr(validator, "_validate_function", None)
    if check is not None:
        validator._validate_function = _validated_once(check)
    return encoder
