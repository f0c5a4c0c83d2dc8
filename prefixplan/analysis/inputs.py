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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from prefixplan.analysis.record import TokenizerInfo
from prefixplan.analysis.rowstore import RowStore
from prefixplan.logs import LineErrors
from prefixplan.render import RenderSet
from prefixplan.render.engine_ids import ENGINE_LABEL, ENGINE_SPEC
from prefixplan.render.resolve import family_of_model, family_of_spec, suggestion

ENGINE_TOKENIZER = TokenizerInfo(spec=ENGINE_SPEC, label=ENGINE_LABEL, fingerprint=None, exact=True)


def files_json(store: RowStore, errors: LineErrors) -> list[dict[str, Any]]:
    """``inputs.files``: one entry per file, in the order read (its formats counted from the rows)."""
    c = store.columns()
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    if len(store):
        # one count per (source, format) pair: a bincount of both ids in one int64
        n_formats = max(1, len(store.formats.names))
        n = np.bincount(c["source"].astype(np.int64) * n_formats + c["format"])
        for pair in np.flatnonzero(n).tolist():
            src, fmt = divmod(pair, n_formats)
            counts[store.sources.names[src]][store.formats.names[fmt]] += int(n[pair])
    out = []
    for source in dict.fromkeys([*errors.in_order(), *store.sources.names]):
        info = errors.sources.get(source)
        entry: dict[str, Any] = {"path": source, "formats": dict(counts.get(source, {}))}
        if info is not None:
            entry.update(reader=info.reader, detected=info.detected, notes=list(info.notes), counts=dict(info.counts))
        out.append(entry)
    return out


def models_json(store: RowStore, reused: np.ndarray, spec_of: Mapping[str, str], engine_used: bool) -> dict[str, Any]:
    """``inputs.per_model``: requests, tokens, reusable tokens, hit rates and tokenizer per model
    (``reused``: reusable tokens of each request, input order; ``spec_of``: model -> tokenizer)."""
    c = store.columns()
    out: dict[str, Any] = {}
    n_models = len(store.models.names)
    if not len(store):
        return out
    requests = np.bincount(c["model"], minlength=n_models)
    tokens = np.bincount(c["model"], weights=c["prompt"], minlength=n_models)
    reuse = np.bincount(c["model"], weights=reused, minlength=n_models)
    hits = np.bincount(c["model"], weights=(reused > 0), minlength=n_models)
    for m in sorted(range(n_models), key=lambda m: -tokens[m]):
        model = store.models.names[m]
        n, tok, r, h = int(requests[m]), int(tokens[m]), int(reuse[m]), int(hits[m])
        out[model] = {
            "requests": n,
            "prompt_tokens": tok,
            "reusable_tokens": r,
            "hit_rate_tokens": r / tok if tok else 0.0,
            "hit_rate_requests": h / n if n else 0.0,
            "tokenizer": spec_of.get(model, ENGINE_SPEC if engine_used else None),
        }
    return out


def tokenizer_infos(renderers: RenderSet) -> list[TokenizerInfo]:
    """The tokenizers of a run, most-used first (the first is the record's ``tokenizer``)."""
    infos: list[tuple[int, TokenizerInfo]] = []
    for r in renderers.facts():
        models = sorted(m for m in renderers.models_by_spec.get(r.spec, ()) if m != "-")
        matches, suggested = _matches(r.spec, models, r.model)
        info = TokenizerInfo(
            spec=r.spec,
            label=r.label,
            fingerprint=r.fingerprint,
            exact=r.exact,
            probe_ids=r.probe_ids,
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
