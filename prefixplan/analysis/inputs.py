"""What the analysis says about its inputs: files and formats, models, and their tokenizers.

- Per file: the reader it was read with and how that was decided (``--log-format`` or
  detection), the formats of its requests, and what the reader noted (a vLLM log's
  ``--max-log-len``, requests cut by it, ``/tokenize`` calls skipped).
- Per model: requests, prompt tokens, tokens reusable with an infinite cache and the tokenizer
  that rendered them, so a log that mixes models reads as one section per model.
- Tokenizers: each renderer that was used, with ``matches_log_model`` (is it the tokenizer of the
  models the log names for its requests? -- from the family table of
  :mod:`prefixplan.render.resolve`) and the ``--tokenizer`` to use when it is not. Requests
  analysed from an engine log's own token ids get the ``engine`` entry.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from prefixplan.analysis.record import TokenizerInfo
from prefixplan.core.probe import TOKENIZER_PROBE_TEXT
from prefixplan.core.types import Prompt
from prefixplan.logs import LineErrors
from prefixplan.render import RenderSet
from prefixplan.render.engine_ids import ENGINE_LABEL, ENGINE_SPEC
from prefixplan.render.resolve import family_of_model, family_of_spec, suggestion

ENGINE_TOKENIZER = TokenizerInfo(spec=ENGINE_SPEC, label=ENGINE_LABEL, fingerprint=None, exact=True)


class InputAccounting:
    """Per-file and per-model counts of the single pass (fed every prompt and its reused tokens)."""

    def __init__(self) -> None:
        self.files: dict[str, Counter[str]] = defaultdict(Counter)
        self.models: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # requests, tokens, reused, hits

    def add(self, prompt: Prompt, reused: int) -> None:
        req = prompt.request
        self.files[req.source][req.format] += 1
        row = self.models[req.model or "-"]
        scale = prompt.token_scale
        row[0] += 1
        row[1] += len(prompt) * scale
        row[2] += reused * scale
        row[3] += reused > 0

    def files_json(self, errors: LineErrors) -> list[dict[str, Any]]:
        """``inputs.files``: one entry per file, in the order read."""
        out = []
        for source in dict.fromkeys([*errors.sources, *self.files]):
            info = errors.sources.get(source)
            entry: dict[str, Any] = {"path": source, "formats": dict(self.files.get(source, {}))}
            if info is not None:
                entry.update(
                    reader=info.reader, detected=info.detected, notes=list(info.notes), counts=dict(info.counts)
                )
            out.append(entry)
        return out

    def models_json(self, renderers: RenderSet) -> dict[str, Any]:
        """``inputs.per_model``: requests, tokens, reusable tokens, hit rates and tokenizer per model."""
        spec_of = {m: spec for spec, models in renderers.models_by_spec.items() for m in models}
        out = {}
        for model, (n, tokens, reused, hits) in sorted(self.models.items(), key=lambda kv: -kv[1][1]):
            out[model] = {
                "requests": n,
                "prompt_tokens": tokens,
                "reusable_tokens": reused,
                "hit_rate_tokens": reused / tokens if tokens else 0.0,
                "hit_rate_requests": hits / n if n else 0.0,
                "tokenizer": spec_of.get(model, ENGINE_SPEC if renderers.engine_ids.get("used") else None),
            }
        return out


def tokenizer_infos(renderers: RenderSet) -> list[TokenizerInfo]:
    """The tokenizers of a run, most-used first (the first is the record's ``tokenizer``)."""
    infos: list[tuple[int, TokenizerInfo]] = []
    for r in renderers.loaded:
        models = sorted(m for m in renderers.models_by_spec.get(r.spec, ()) if m != "-")
        served = getattr(r, "model", None)
        matches, suggested = _matches(r.spec, models, served if isinstance(served, str) else None)
        info = TokenizerInfo(
            spec=r.spec,
            label=r.label,
            fingerprint=r.fingerprint,
            exact=r.exact,
            probe_ids=tuple(int(t) for t in r.encode_text(TOKENIZER_PROBE_TEXT)[0]),
            matches_log_model=matches,
            log_models=tuple(models),
            suggested=suggested,
        )
        infos.append((renderers.prompts_by_spec.get(r.spec, 0), info))
    used = renderers.engine_ids.get("used", 0)
    if used:
        verified = sum(v for k, v in renderers.engine_ids.items() if k.startswith("same ids"))
        infos.append((used - verified, ENGINE_TOKENIZER))
    infos.sort(key=lambda item: -item[0])
    return [info for _, info in infos]


def _matches(spec: str, models: Sequence[str], served: str | None) -> tuple[bool | None, str | None]:
    """(is ``spec`` the tokenizer of every model in ``models``?, the flag to use instead)."""
    if not models:
        return None, None
    have = family_of_spec(spec, served)
    wrong, unknown = [], False
    for model in models:
        if served is not None and model == served:
            continue  # the server that serves the model tokenizes it
        want = family_of_model(model)
        if want is None or have is None:
            unknown = True
        elif want.name != have.name:
            wrong.append(model)
    if wrong:
        return False, suggestion(list(models)) or suggestion(wrong)
    return (None, None) if unknown else (True, None)


def mismatch_reason(tokenizers: Sequence[TokenizerInfo]) -> str | None:
    """Why counts are approximate because a tokenizer is not the log model's, or None."""
    parts = []
    for t in tokenizers:
        if t.matches_log_model is False:
            models = ", ".join(t.log_models[:3]) + (" ..." if len(t.log_models) > 3 else "")
            parts.append(
                f"tokenizer {t.spec} is not the log model's ({models})"
                + (f"; use {t.suggested}" if t.suggested else "")
            )
    return "; ".join(parts) or None
