"""Render requests into the exact token ids an engine computes, with segment spans.

Backends (``--tokenizer SPEC``):

- ``hf:PATH``           local Hugging Face tokenizer folder + chat template (exact)
- ``mistral:NAME``      tokenizers shipped in mistral-common (exact); ``mistral:nemo`` is the
                        embedded default used when no ``--tokenizer`` is given
- ``tiktoken:NAME``     OpenAI encodings, documented rendering (approximate)
- ``vllm:URL``          the server's own ``/tokenize`` (exact)
- ``sglang:URL``        the SGLang server's own ``/tokenize`` (exact)
- ``auto``              per model, from the family table of :mod:`prefixplan.render.resolve`

``hf:ORG/NAME`` (a hub id) resolves from the local Hugging Face cache (render/resolve.py).
Requests from engine server logs carry the engine's own token ids and need no tokenizer
(render/engine_ids.py).

Mooncake traces carry block hash ids, not text: they are "rendered" to one id per block
(``token_scale`` = trace block size), whatever the backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from prefixplan.core.hashes import segment_hash
from prefixplan.core.probe import TOKENIZER_PROBE_TEXT
from prefixplan.core.types import Prompt, Request, Segment, as_token_ids
from prefixplan.core.urls import has_userinfo, without_userinfo
from prefixplan.errors import TokenizerError, UsageError

DEFAULT_TOKENIZER = "mistral:nemo"


class Renderer(Protocol):
    spec: str
    label: str
    fingerprint: str
    exact: bool

    def render(self, request: Request) -> Prompt: ...

    def render_many(self, requests: Sequence[Request]) -> list[Prompt]: ...

    def encode_text(self, text: str, *, add_special_tokens: bool = False) -> tuple[np.ndarray, np.ndarray]: ...

    def encode_stats(self) -> dict[str, int]:
        """``{"incremental": n, "full": n}``: requests this renderer encoded reusing ids of an
        earlier encode, and requests it encoded entirely for themselves."""
        ...


@dataclass(frozen=True, slots=True)
class RendererFacts:
    """What a run's record says about a tokenizer, without the tokenizer: a worker process
    sends these, so the parent never loads a tokenizer only to describe it."""

    spec: str
    label: str
    fingerprint: str
    exact: bool
    model: str | None  # the served model of a remote (vllm:/sglang:) tokenizer
    probe_ids: tuple[int, ...]  # ids of TOKENIZER_PROBE_TEXT

    @classmethod
    def of(cls, renderer: Renderer) -> RendererFacts:
        served = getattr(renderer, "model", None)
        return cls(
            spec=renderer.spec,
            label=renderer.label,
            fingerprint=renderer.fingerprint,
            exact=bool(renderer.exact),
            model=served if isinstance(served, str) else None,
            probe_ids=tuple(int(t) for t in renderer.encode_text(TOKENIZER_PROBE_TEXT)[0]),
        )


def check_spec(spec: str, where: str = "--tokenizer ") -> None:
    """Refuse a tokenizer spec whose URL carries credentials (``user:password@``, or a query
    string, a token's usual place), as ``warm``/``status`` refuse such an endpoint URL: a spec is
    printed in reports and stored in records, and credentials come from the environment.

    Raises:
        UsageError: naming the spec without its credentials.
    """
    scheme, _, rest = spec.partition(":")
    remote = scheme in ("vllm", "sglang")
    if not (remote or "://" in rest):
        return
    if has_userinfo(rest):
        what = "user:password@"
    elif remote and any(c in rest for c in "?#"):
        what = "a query string"
    else:
        return
    raise UsageError(
        f"{where}{scheme}:{without_userinfo(rest)}: the URL carries credentials ({what})",
        hint="put the key in an environment variable (PREFIXPLAN_API_KEY, sent as a bearer token) "
        "and give the URL without it",
    )


BACKENDS: dict[str, str] = {
    "hf": "prefixplan.render.hf:from_spec",
    "mistral": "prefixplan.render.mistral:from_spec",
    "tiktoken": "prefixplan.render.tiktoken_backend:from_spec",
    "vllm": "prefixplan.render.vllm_remote:vllm_from_spec",
    "sglang": "prefixplan.render.vllm_remote:sglang_from_spec",
}
"""Tokenizer scheme -> ``module:function`` that builds its renderer from the rest of the spec.
Imported on first use: naming a scheme loads only its backend (transformers for ``hf:`` only)."""
TEMPLATED = frozenset({"hf"})
"""Schemes whose renderer takes ``--chat-template`` / ``--template-kwargs``."""


def _backend(scheme: str) -> Callable[..., Renderer]:
    import importlib

    module, _, name = BACKENDS[scheme].partition(":")
    build: Callable[..., Renderer] = getattr(importlib.import_module(module), name)
    return build


def load_renderer(
    spec: str | None = None,
    *,
    chat_template: str | Path | None = None,
    template_kwargs: dict[str, Any] | None = None,
) -> Renderer:
    """Load a renderer from a spec string (see module docstring), through :data:`BACKENDS`."""
    spec = spec or DEFAULT_TOKENIZER
    check_spec(spec)
    scheme, _, rest = spec.partition(":")
    if spec == "auto":
        raise UsageError(
            "--tokenizer auto picks a tokenizer per model of a log; here one tokenizer is needed",
            hint="name it: hf:ORG/NAME, hf:PATH, mistral:nemo, tiktoken:NAME, vllm:URL or sglang:URL",
        )
    if scheme not in BACKENDS:
        raise UsageError(
            f"--tokenizer {spec}: unknown scheme {scheme!r}",
            hint="use hf:PATH or hf:ORG/NAME, mistral:nemo, tiktoken:o200k_base, vllm:URL, sglang:URL or auto",
        )
    template_text = None
    if chat_template is not None:
        path = Path(chat_template)
        if not path.is_file():
            raise UsageError(f"--chat-template {chat_template}: file not found")
        template_text = path.read_text(encoding="utf-8")
    if scheme in TEMPLATED:
        return _backend(scheme)(spec, rest, chat_template=template_text, template_kwargs=template_kwargs)
    if template_text is not None or template_kwargs:
        raise UsageError(f"--chat-template/--template-kwargs apply to hf: tokenizers only, not {spec}")
    return _backend(scheme)(spec, rest)


def parse_template_kwargs(text: str | None) -> dict[str, Any]:
    """``--template-kwargs`` as JSON (``{"date_string": "26 Jul 2024"}``) or ``k=v,k=v``."""
    if not text:
        return {}
    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--template-kwargs: invalid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise UsageError("--template-kwargs: expected a JSON object")
        return value
    out: dict[str, Any] = {}
    for item in text.split(","):
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--template-kwargs: expected KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(val)
        except json.JSONDecodeError:
            out[key.strip()] = val
    return out


def parse_tokenizer_map(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        model, sep, spec = item.partition("=")
        if not sep or not model or not spec:
            raise UsageError(f"--tokenizer-map {item!r}: expected MODEL=SPEC")
        out[model] = spec
    return out


def trace_prompt(request: Request) -> Prompt:
    """A Mooncake trace request: one id per block of ``trace_block_size`` tokens."""
    assert request.hash_ids is not None
    tokens = as_token_ids(np.asarray(request.hash_ids, dtype=np.uint32))
    seg = Segment("block", 0, len(tokens), segment_hash(tokens.tobytes()))
    return Prompt(request, tokens, (seg,), (), exact=False, token_scale=request.trace_block_size or 512)


@dataclass
class RenderSet:
    """Renderers by model: the default one plus ``--tokenizer-map`` entries (loaded lazily).

    A spec ``auto`` (the default or a map value) picks each model's tokenizer from the family
    table (:func:`prefixplan.render.resolve.auto_spec`). ``models_by_spec`` records which models
    each spec rendered; ``engine_ids`` counts requests analysed from their logged engine ids
    (``"used"``) and, when a tokenizer was named for their model, whether its rendering gave the
    same ids (``"same ids as <spec>"`` / ``"other ids than <spec>"``).
    """

    default_spec: str | None = None
    by_model: dict[str, str] = field(default_factory=dict)
    chat_template: str | Path | None = None
    template_kwargs: dict[str, Any] | None = None
    _loaded: dict[str, Renderer] = field(default_factory=dict)
    _auto: dict[str, str] = field(default_factory=dict)
    models_by_spec: dict[str, set[str]] = field(default_factory=dict)
    prompts_by_spec: dict[str, int] = field(default_factory=dict)
    engine_ids: dict[str, int] = field(default_factory=dict)
    reported: dict[str, RendererFacts] = field(default_factory=dict)  # from workers, by spec
    encoded_elsewhere: dict[str, int] = field(default_factory=dict)  # workers' encode_stats, summed
    _facts: dict[str, RendererFacts] = field(default_factory=dict)
    _preloads: dict[str, Future[Renderer]] = field(default_factory=dict)
    spans: bool = True  # False: renderers that can leave Prompt.segments/chunks empty do

    def __post_init__(self) -> None:
        if self.default_spec:
            check_spec(self.default_spec)
        for model, spec in self.by_model.items():
            check_spec(spec, f"--tokenizer-map {model}=")

    def facts(self) -> list[RendererFacts]:
        """The tokenizers that rendered this run: those loaded here, then those only workers
        loaded (:attr:`reported`), each once."""
        out: dict[str, RendererFacts] = {}
        for spec, renderer in self._loaded.items():
            if spec not in self._facts:
                self._facts[spec] = RendererFacts.of(renderer)
            out[spec] = self._facts[spec]
        for spec, facts in self.reported.items():
            out.setdefault(spec, facts)
        return list(out.values())

    def spec_for(self, model: str | None) -> str:
        """The spec that renders ``model`` (``auto`` resolved per model)."""
        spec = self.by_model.get(model or "", self.default_spec) or DEFAULT_TOKENIZER
        if spec == "auto":
            key = model or ""
            if key not in self._auto:
                from prefixplan.render.resolve import auto_spec

                self._auto[key] = auto_spec(model)
            spec = self._auto[key]
        return spec

    def explicit(self, model: str | None) -> bool:
        """Whether a tokenizer was named for ``model`` (not the built-in default)."""
        return (model or "") in self.by_model or self.default_spec is not None

    def for_model(self, model: str | None) -> Renderer:
        spec = self.spec_for(model)
        self.models_by_spec.setdefault(spec, set()).add(model or "-")
        renderer = self._loaded.get(spec)
        if renderer is None:
            pending = self._preloads.pop(spec, None)
            if pending is not None:
                try:
                    renderer = pending.result()
                except Exception:  # loaded again below, where the error is raised
                    renderer = None
            if renderer is None:
                renderer = self._load(spec)
            self._loaded[spec] = renderer
        return renderer

    def _load(self, spec: str) -> Renderer:
        if spec.startswith("hf:"):
            return load_renderer(spec, chat_template=self.chat_template, template_kwargs=self.template_kwargs)
        return load_renderer(spec)

    def preload(self, model: str | None) -> None:
        """Start loading ``model``'s renderer on a background thread; :meth:`for_model` takes it
        when it is needed (waiting for the load to finish). While worker processes render, the
        parent's own renderer (for the few requests it re-renders at the end: the shown
        candidates' token ids) then loads in the time it spends waiting for them, not after.
        Counts nothing as rendered; a load that fails here is tried again by :meth:`for_model`,
        which raises its error."""
        spec = self.spec_for(model)
        if spec in self._loaded or spec in self._preloads:
            return
        import threading

        pending: Future[Renderer] = Future()

        def load() -> None:
            try:
                pending.set_result(self._load(spec))
            except BaseException as exc:  # handed to for_model
                pending.set_exception(exc)

        self._preloads[spec] = pending
        threading.Thread(target=load, name=f"prefixplan-preload-{spec}", daemon=True).start()

    def warm(self, model: str | None = None) -> None:
        """Load ``model``'s renderer now, without counting it as used (a render worker's start:
        :meth:`for_model` takes it when a request needs it). A load that fails is left for
        :meth:`for_model` to raise."""
        self.preload(model)
        pending = self._preloads.get(self.spec_for(model))
        if pending is not None:
            try:
                pending.result()
            except Exception:  # raised again where a request needs this renderer
                return

    @property
    def loaded(self) -> list[Renderer]:
        return list(self._loaded.values())

    def encode_stats(self) -> dict[str, int]:
        """:meth:`Renderer.encode_stats` summed over the renderers loaded here, plus what workers
        reported (:attr:`encoded_elsewhere`)."""
        out = {"incremental": 0, "full": 0}
        for key, value in self.encoded_elsewhere.items():
            out[key] = out.get(key, 0) + value
        for renderer in self._loaded.values():
            for key, value in renderer.encode_stats().items():
                out[key] = out.get(key, 0) + value
        return out

    def render_batch(self, batch: Sequence[Request]) -> list[Prompt | TokenizerError]:
        """Render a batch (grouped by renderer); a request that fails gets its error instead."""
        from prefixplan.render.engine_ids import adopt, carries_engine_ids, ids_prompt

        groups: dict[int, list[int]] = {}
        renderers: dict[int, Renderer] = {}
        out: list[Prompt | TokenizerError | None] = [None] * len(batch)
        engine: set[int] = set()
        for i, req in enumerate(batch):
            if req.hash_ids is not None:
                out[i] = trace_prompt(req)
                continue
            if carries_engine_ids(req):
                self.engine_ids["used"] = self.engine_ids.get("used", 0) + 1
                if req.messages is None or not self.explicit(req.model):
                    out[i] = ids_prompt(req)
                    continue
                engine.add(i)
                try:  # the ids need no tokenizer: one that cannot be found only means no spans
                    r = self.for_model(req.model)
                except (UsageError, TokenizerError):
                    out[i] = ids_prompt(req)
                    continue
            else:
                r = self.for_model(req.model)
            groups.setdefault(id(r), []).append(i)
            renderers[id(r)] = r
        for rid, idxs in groups.items():
            r = renderers[rid]
            try:
                part = [batch[i] for i in idxs]
                results: list[Prompt | TokenizerError] = list(
                    r.render_many(part)
                    if self.spans or not getattr(r, "spans_optional", False)
                    else r.render_many(part, spans=False)  # type: ignore[call-arg]
                )
            except TokenizerError:
                results = []
                for i in idxs:
                    try:
                        results.append(r.render(batch[i]))
                    except TokenizerError as exc:
                        results.append(exc)
            for i, p in zip(idxs, results, strict=False):
                if i in engine:
                    same = False
                    if isinstance(p, Prompt):
                        p, same = adopt(p, batch[i])
                    else:
                        p = ids_prompt(batch[i])
                    key = f"{'same ids as' if same else 'other ids than'} {r.spec}"
                    self.engine_ids[key] = self.engine_ids.get(key, 0) + 1
                    if not same:
                        out[i] = p
                        continue
                out[i] = p
                self.prompts_by_spec[r.spec] = self.prompts_by_spec.get(r.spec, 0) + 1
        return out  # type: ignore[return-value]

    @contextmanager
    def without_spans(self) -> Iterator[None]:
        """Render without segment spans where the renderer can (``spans_optional``): the same
        ids, empty ``segments`` and ``chunks``; for passes that read only ids and counts."""
        before, self.spans = self.spans, False
        try:
            yield
        finally:
            self.spans = before

    def render_stream(
        self,
        requests: Iterable[Request],
        *,
        batch: int = 256,
        on_error: Callable[[Request, TokenizerError], None] | None = None,
    ) -> Iterator[Prompt]:
        """Render requests in arrival order, in batches (cache misses are encoded together).

        ``on_error(request, exc)`` receives requests that fail to render (counted by the
        caller); without it the error propagates.
        """
        for req, result in self._render_serial(requests, batch):
            if isinstance(result, TokenizerError):
                if on_error is None:
                    raise result
                on_error(req, result)
            else:
                yield result

    def _render_serial(
        self, requests: Iterable[Request], batch: int
    ) -> Iterator[tuple[Request, Prompt | TokenizerError]]:
        pending: list[Request] = []
        for req in requests:
            pending.append(req)
            if len(pending) >= batch:
                yield from zip(pending, self.render_batch(pending), strict=False)
                pending = []
        if pending:
            yield from zip(pending, self.render_batch(pending), strict=False)
