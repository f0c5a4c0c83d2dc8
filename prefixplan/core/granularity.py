"""Reuse granularity: which prompt prefixes an engine or a hosted API can serve from cache.

Every figure prefixplan reports names the :class:`Granularity` it assumed.

Engines (``--engine``) reuse whole blocks/pages/chunks of ``block_size`` tokens:

=========  ==========  ===================================================
engine     block_size  meaning
=========  ==========  ===================================================
vllm       16          KV block (vLLM V1 default on GPU); full blocks only
sglang     1           radix-tree page (``--page-size`` default 1)
lmcache    256         LMCache chunk (``chunk_size`` default 256)
=========  ==========  ===================================================

Hosted providers (``--provider``):

* ``openai``: a prefix is reused only from 1,024 tokens on, in 128-token increments
  (block size 128, at least 8 blocks).
* ``anthropic``: a prefix is cached only up to a ``cache_control`` breakpoint (from the
  request, or ``auto`` = one breakpoint at the end of every prompt) and only if it is at
  least the model's minimum cacheable length (:data:`ANTHROPIC_MIN_TOKENS`).

Rules shared by all: only full blocks are reused, and the last prompt token is never
reused (engines must compute it to produce the first output token). Anthropic bills cache
reads up to the breakpoint, so the last-token rule does not apply there.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixplan.errors import UsageError

ENGINE_BLOCK_SIZES: dict[str, int] = {"vllm": 16, "sglang": 1, "lmcache": 256}

OPENAI_MIN_TOKENS = 1024
OPENAI_INCREMENT = 128

# Anthropic minimum cacheable prompt length per model family (prompt caching docs, 2025).
# Matched by substring of the model name, first match wins; unknown models use the default.
ANTHROPIC_MIN_TOKENS: tuple[tuple[str, int], ...] = (
    ("opus-4-5", 4096),
    ("haiku-4-5", 4096),
    ("haiku", 2048),  # Claude 3 Haiku, Claude 3.5 Haiku
    ("opus", 1024),  # Claude Opus 4 / 4.1, Claude 3 Opus
    ("sonnet", 1024),  # Claude Sonnet 4 / 4.5, 3.7, 3.5
)
ANTHROPIC_DEFAULT_MIN_TOKENS = 1024


def anthropic_min_tokens(model: str | None) -> int:
    """Minimum cacheable prefix length for an Anthropic model name (see module table)."""
    name = (model or "").lower().replace(".", "-")
    for key, value in ANTHROPIC_MIN_TOKENS:
        if key in name:
            return value
    return ANTHROPIC_DEFAULT_MIN_TOKENS


def aligned(n: int, block: int) -> int:
    """Round ``n`` down to a multiple of ``block`` (``(n // block) * block``).

    Args:
        n: A token count (>= 0).
        block: Engine granularity in tokens (vLLM block size, SGLang page size), >= 1.
    """
    if block < 1:
        raise UsageError(f"block size must be >= 1, got {block}", hint="vLLM uses 16, SGLang 1 (its page size)")
    return (n // block) * block


def reusable_prefix(match_len: int, prompt_len: int, block: int) -> int:
    """Tokens an engine can take from its prefix cache for one request.

    Engines never reuse the last prompt token (they must compute at least one position to
    produce logits) and only reuse full blocks, so this is
    ``aligned(min(match_len, prompt_len - 1), block)``; 0 for an empty prompt.

    Args:
        match_len: Longest cached prefix of the prompt (e.g. :meth:`RadixTree.insert`'s result).
        prompt_len: Prompt length in tokens.
        block: Cache granularity in tokens (>= 1).
    """
    return aligned(max(0, min(match_len, prompt_len - 1)), block)


def reusable_ids(match_len: int, prompt_len: int, block: int, scale: int = 1) -> int:
    """:func:`reusable_prefix` for a prompt of ``prompt_len`` ids that each stand for ``scale``
    tokens (block-level traces): the block is rescaled to ids; 0 for an empty prompt."""
    if not prompt_len:
        return 0
    return reusable_prefix(match_len, prompt_len, max(1, block // scale) if scale > 1 else block)


@dataclass(frozen=True, slots=True)
class Granularity:
    """How prompt prefixes are reused.

    Attributes:
        name: ``vllm``, ``sglang``, ``lmcache``, ``openai``, ``anthropic`` or ``custom``.
        block_size: real tokens per reusable block.
        min_tokens: a reused prefix shorter than this counts as a miss (OpenAI 1,024;
            Anthropic: the model minimum, applied to breakpoints).
        breakpoints: ``None`` for block caches; ``"request"`` or ``"auto"`` for Anthropic.
        last_token_rule: the last prompt token is never reused.
    """

    name: str
    block_size: int
    min_tokens: int = 0
    breakpoints: str | None = None
    last_token_rule: bool = True

    def describe(self) -> str:
        """One line naming the granularity, printed next to every figure."""
        if self.breakpoints is not None:
            src = "cache_control breakpoints" if self.breakpoints == "request" else "auto breakpoint at prompt end"
            return f"anthropic: {src}, minimum {self.min_tokens} tokens"
        if self.name == "openai":
            return f"openai: >= {self.min_tokens} tokens in {self.block_size}-token increments, last token never reused"
        unit = {"sglang": "page", "lmcache": "chunk"}.get(self.name, "block")
        return f"{self.name}: full {self.block_size}-token {unit}s only, last prompt token never reused"


def engine_granularity(engine: str, block_size: int | None = None) -> Granularity:
    """Granularity of a serving engine; ``block_size`` overrides the engine default."""
    key = engine.lower()
    if key not in ENGINE_BLOCK_SIZES and key != "custom":
        raise UsageError(f"unknown engine {engine!r}", hint="use vllm, sglang or lmcache")
    size = block_size if block_size is not None else ENGINE_BLOCK_SIZES.get(key, 16)
    if size < 1:
        raise UsageError(f"block size must be >= 1, got {size}", hint="vLLM uses 16, SGLang 1 (its page size)")
    return Granularity(name=key, block_size=int(size))


def provider_granularity(provider: str, model: str | None = None, breakpoints: str = "request") -> Granularity:
    """Granularity of a hosted API.

    Args:
        provider: ``openai`` or ``anthropic``.
        model: model name (Anthropic minimum cacheable length depends on it).
        breakpoints: Anthropic only: ``request`` (use the log's ``cache_control``; requests
            without any fall back to ``auto``) or ``auto`` (one breakpoint at the prompt end).
    """
    key = provider.lower()
    if key == "openai":
        return Granularity(name="openai", block_size=OPENAI_INCREMENT, min_tokens=OPENAI_MIN_TOKENS)
    if key == "anthropic":
        if breakpoints not in ("request", "auto"):
            raise UsageError(f"unknown breakpoint mode {breakpoints!r}", hint="use request or auto")
        return Granularity(
            name="anthropic",
            block_size=1,
            min_tokens=anthropic_min_tokens(model),
            breakpoints=breakpoints,
            last_token_rule=False,
        )
    raise UsageError(f"unknown provider {provider!r}", hint="use openai or anthropic")
