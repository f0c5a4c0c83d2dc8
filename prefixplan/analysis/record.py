"""The analysis record: the one home of its schema version, its typed form, loading and validation.

``prefixplan analyze --json FILE`` writes :meth:`AnalysisRecord.to_json`; everything that reads a
record (``report``, ``warm``, ``simulate --pins-from``, the store) goes through
:func:`load_record` / :meth:`AnalysisRecord.from_json`, which check the schema version and the
fields every reader relies on and name the offending field when one is wrong. In memory the
record is typed (candidates, tokenizers, summary); sections that are only displayed (``kinds``,
``rag``, ``simulation``, ``breakers``, ``errors``, ``inputs``, ``privacy``) stay JSON objects.
The JSON layout is documented in docs/analysis-record.md and is a versioned contract: a field is
added without a version bump only when old readers can ignore it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from prefixplan.errors import InputError

SCHEMA_VERSION = 1
"""Version of the JSON layout written by this prefixplan; readers refuse newer ones."""

_HINT = "pass the file written by prefixplan analyze LOG --json FILE"


def _field(
    where: str,
    data: Mapping[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    *,
    optional: bool = False,
    default: Any = None,
) -> Any:
    value = data.get(key, default)
    if value is None and optional:
        return default
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise InputError(f"{where}.{key}: expected a number, got {value!r}", hint=_HINT)
    if not isinstance(value, kind):
        want = " or ".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__
        raise InputError(f"{where}.{key}: expected {want}, got {type(value).__name__}", hint=_HINT)
    return value


def _ids(where: str, value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 2**32 for i in value
    ):
        raise InputError(f"{where}: expected a list of token ids (integers in uint32)", hint=_HINT)
    return tuple(value)


@dataclass(frozen=True, slots=True)
class TokenizerInfo:
    """Which tokenizer produced a record's token ids.

    ``probe_ids`` are its ids for :data:`prefixplan.core.probe.TOKENIZER_PROBE_TEXT`, which warm
    compares with a server's ``/tokenize``; ``fingerprint`` is None for block-level traces.
    ``matches_log_model``: is it the tokenizer of the models it rendered (``log_models``)? False:
    counts approximate, ``suggested`` is the flag to use; None: cannot be told (render/resolve.py).
    """

    spec: str
    label: str
    fingerprint: str | None
    exact: bool
    probe_ids: tuple[int, ...] | None = None
    matches_log_model: bool | None = None
    log_models: tuple[str, ...] = ()
    suggested: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "spec": self.spec,
            "label": self.label,
            "fingerprint": self.fingerprint,
            "exact": self.exact,
        }
        if self.probe_ids is not None:
            out["probe_ids"] = list(self.probe_ids)
        if self.matches_log_model is not None:
            out["matches_log_model"] = self.matches_log_model
        if self.log_models:
            out["log_models"] = list(self.log_models)
        if self.suggested is not None:
            out["suggested"] = self.suggested
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "tokenizer") -> TokenizerInfo:
        if not isinstance(data, Mapping):
            raise InputError(f"{where}: expected an object", hint=_HINT)
        spec = str(data.get("spec") or "")
        return cls(
            spec=spec,
            label=str(data.get("label") or spec),
            fingerprint=_field(where, data, "fingerprint", str, optional=True),
            exact=bool(data.get("exact", True)),
            probe_ids=_ids(f"{where}.probe_ids", data.get("probe_ids")),
            matches_log_model=_field(where, data, "matches_log_model", bool, optional=True),
            log_models=tuple(str(m) for m in data.get("log_models") or ()),
            suggested=_field(where, data, "suggested", str, optional=True),
        )


TRACE_TOKENIZER = TokenizerInfo(spec="trace", label="trace blocks", fingerprint=None, exact=False)


@dataclass(frozen=True, slots=True)
class CandidatePart:
    """One segment of a candidate: its kind, tokens, and text (None when withheld or not text)."""

    kind: str
    tokens: int
    text: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "tokens": self.tokens, "text": self.text}


@dataclass(frozen=True, slots=True)
class ExampleRef:
    """Where a candidate's representative request is in the log (to re-read it)."""

    source: str
    line: int

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "line": self.line}


@dataclass(frozen=True, slots=True)
class CandidateRecord:
    """One ranked shared prefix as recorded (docs/analysis-record.md, ``candidates[]``)."""

    rank: int
    namespace: str
    label: str
    length: int
    hits: int
    reusable_tokens: int
    marginal_tokens: int
    name: str | None = None
    key: str | None = None
    model: str | None = None
    kinds: tuple[str, ...] = ()
    raw_length: int | None = None
    tenants: int = 0
    tenants_capped: bool = False
    first_seen: float | None = None
    last_seen: float | None = None
    parent: int | None = None
    withheld: bool = False
    token_ids: tuple[int, ...] | None = field(default=None, repr=False)
    token_hash: str | None = None
    preview: str | None = None
    parts: tuple[CandidatePart, ...] = ()
    system_head: str | None = field(default=None, repr=False)
    example: ExampleRef | None = None
    content_hash: str | None = None  # pp1 over the recipe bytes of its system/tool parts

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools the prefix covers (from its parts)."""
        return [p.text for p in self.parts if p.kind == "tool" and p.text]

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "name": self.name,
            "key": self.key,
            "namespace": self.namespace,
            "model": self.model if self.model is not None else self.namespace.split("|", 1)[0],
            "label": self.label,
            "kinds": list(self.kinds),
            "length": self.length,
            "raw_length": self.raw_length if self.raw_length is not None else self.length,
            "hits": self.hits,
            "tenants": self.tenants,
            "tenants_capped": self.tenants_capped,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "parent": self.parent,
            "reusable_tokens": self.reusable_tokens,
            "marginal_tokens": self.marginal_tokens,
            "withheld": self.withheld,
            "token_ids": list(self.token_ids) if self.token_ids is not None else None,
            "token_hash": self.token_hash,
            "preview": self.preview,
            "parts": [p.to_json() for p in self.parts],
            "system_head": self.system_head,
            "example": self.example.to_json() if self.example else None,
            "content_hash": self.content_hash,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> CandidateRecord:
        """Validate one ``candidates[]`` entry; errors name ``where`` and the field."""
        if not isinstance(data, Mapping):
            raise InputError(f"{where}: expected an object", hint=_HINT)
        ids = _ids(f"{where}.token_ids", data.get("token_ids"))
        length = _field(where, data, "length", int, optional=True, default=len(ids) if ids is not None else 0)
        parts = []
        for i, p in enumerate(data.get("parts") or ()):
            if not isinstance(p, Mapping):
                raise InputError(f"{where}.parts[{i}]: expected an object", hint=_HINT)
            text = p.get("text")
            parts.append(
                CandidatePart(str(p.get("kind") or ""), int(p.get("tokens") or 0), None if text is None else str(text))
            )
        ex = data.get("example")
        example = None
        if isinstance(ex, Mapping) and ex.get("source") is not None:
            example = ExampleRef(str(ex["source"]), int(ex.get("line") or 0))
        reusable = _field(where, data, "reusable_tokens", int, optional=True, default=0)
        marginal = _field(where, data, "marginal_tokens", int, optional=True, default=reusable)
        namespace = str(data.get("namespace") or data.get("model") or "")
        return cls(
            rank=_field(where, data, "rank", int),
            namespace=namespace,
            label=str(data.get("label") or "unknown"),
            length=length,
            hits=_field(where, data, "hits", int, optional=True, default=0),
            reusable_tokens=reusable,
            marginal_tokens=marginal,
            name=_field(where, data, "name", str, optional=True),
            key=_field(where, data, "key", str, optional=True),
            model=_field(where, data, "model", str, optional=True),
            kinds=tuple(str(k) for k in data.get("kinds") or ()),
            raw_length=_field(where, data, "raw_length", int, optional=True, default=length),
            tenants=_field(where, data, "tenants", int, optional=True, default=0),
            tenants_capped=bool(data.get("tenants_capped", False)),
            first_seen=_field(where, data, "first_seen", (int, float), optional=True),
            last_seen=_field(where, data, "last_seen", (int, float), optional=True),
            parent=_field(where, data, "parent", int, optional=True),
            withheld=bool(data.get("withheld", False)),
            token_ids=ids,
            token_hash=_field(where, data, "token_hash", str, optional=True),
            preview=_field(where, data, "preview", str, optional=True),
            parts=tuple(parts),
            system_head=_field(where, data, "system_head", str, optional=True),
            example=example,
            content_hash=_field(where, data, "content_hash", str, optional=True),
        )


@dataclass(frozen=True, slots=True)
class Summary:
    """Headline figures of an analysis (``summary`` in the JSON)."""

    requests: int
    malformed_lines: int
    render_failures: int
    prompt_tokens: int
    reusable_tokens: int
    hit_rate_tokens: float
    hit_rate_requests: float
    shared_prefix_tokens: int
    candidates: int
    namespaces: int
    distinct_tenants: int
    exact: bool
    approximate_reason: str | None = None
    logged_cached_tokens: int | None = None
    time_span_s: float | None = None
    tree_nodes: int = 0
    tree_arena_tokens: int = 0
    elapsed_s: float = 0.0
    encoded: dict[str, int] = field(default_factory=dict)
    """Requests whose ids were encoded partly from an earlier encode (``incremental``) or whole
    (``full``): run metadata like ``elapsed_s``, since each render process reuses only what it
    encoded itself (docs/analyze.md)."""

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def empty(cls) -> Summary:
        """The summary of a record that has none (hand-made records warm reads)."""
        return cls(0, 0, 0, 0, 0, 0.0, 0.0, 0, 0, 0, 0, True)

    @classmethod
    def from_json(cls, data: Any, where: str = "summary") -> Summary:
        if data is None:
            return cls.empty()
        if not isinstance(data, Mapping):
            raise InputError(f"{where}: expected an object", hint=_HINT)
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("requests", "prompt_tokens", "reusable_tokens"):
            _field(where, data, name, int)
        defaults = {
            "malformed_lines": 0,
            "render_failures": 0,
            "hit_rate_tokens": 0.0,
            "hit_rate_requests": 0.0,
            "shared_prefix_tokens": 0,
            "candidates": 0,
            "namespaces": 0,
            "distinct_tenants": 0,
            "exact": True,
        }
        encoded = values.get("encoded")
        values["encoded"] = (
            {str(k): v for k, v in encoded.items() if type(v) is int} if isinstance(encoded, Mapping) else {}
        )
        return cls(**{**defaults, **values})


@dataclass(frozen=True, slots=True)
class AnalysisRecord:
    """A whole analysis record (docs/analysis-record.md). Build with :mod:`prefixplan.analysis.pipeline`,
    read with :func:`load_record`, write :meth:`to_json`."""

    tool: str
    created: str
    inputs: dict[str, Any]
    tokenizer: TokenizerInfo
    tokenizers: tuple[TokenizerInfo, ...]
    granularity: dict[str, Any]
    privacy: dict[str, Any]
    summary: Summary
    kinds: dict[str, Any]
    candidates: tuple[CandidateRecord, ...]
    rag: dict[str, Any]
    simulation: dict[str, Any] | None
    breakers: tuple[dict[str, Any], ...]
    errors: dict[str, Any]
    schema_version: int = SCHEMA_VERSION

    @property
    def block_size(self) -> int | None:
        """The cache granularity the candidates are aligned to."""
        value = self.granularity.get("block_size")
        return int(value) if isinstance(value, int) else None

    def with_candidates(self, candidates: Sequence[CandidateRecord]) -> AnalysisRecord:
        """A copy with ``candidates`` replaced (e.g. after the store named them)."""
        return replace(self, candidates=tuple(candidates))

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool": self.tool,
            "created": self.created,
            "inputs": self.inputs,
            "tokenizer": self.tokenizer.to_json(),
            "tokenizers": [t.to_json() for t in self.tokenizers],
            "granularity": self.granularity,
            "privacy": self.privacy,
            "summary": self.summary.to_json(),
            "kinds": self.kinds,
            "candidates": [c.to_json() for c in self.candidates],
            "rag": self.rag,
            "simulation": self.simulation,
            "breakers": list(self.breakers),
            "errors": self.errors,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "analysis record") -> AnalysisRecord:
        """Validate and type a decoded record.

        Raises:
            InputError: not a record, a newer schema, or a field of the wrong type (named).
        """
        if not isinstance(data, Mapping) or "schema_version" not in data or "candidates" not in data:
            raise InputError(f"{where}: not an analysis record (no schema_version/candidates)", hint=_HINT)
        version = data["schema_version"]
        if not isinstance(version, int) or isinstance(version, bool):
            raise InputError(f"{where}: schema_version: expected an integer, got {version!r}", hint=_HINT)
        if version > SCHEMA_VERSION:
            raise InputError(
                f"{where}: schema_version {version} is newer than this prefixplan understands ({SCHEMA_VERSION})",
                hint="upgrade prefixplan",
            )
        raw_cands = data["candidates"]
        if not isinstance(raw_cands, list):
            raise InputError(f"{where}: candidates: expected a list", hint=_HINT)
        candidates = tuple(CandidateRecord.from_json(c, f"{where}: candidates[{i}]") for i, c in enumerate(raw_cands))
        tokenizer = (
            TokenizerInfo.from_json(data["tokenizer"], f"{where}: tokenizer")
            if isinstance(data.get("tokenizer"), Mapping)
            else TRACE_TOKENIZER
        )
        tokenizers = tuple(
            TokenizerInfo.from_json(t, f"{where}: tokenizers[{i}]") for i, t in enumerate(data.get("tokenizers") or ())
        )
        summary = Summary.from_json(data.get("summary"), f"{where}: summary")

        def section(name: str) -> dict[str, Any]:
            value = data.get(name) or {}
            if not isinstance(value, Mapping):
                raise InputError(f"{where}: {name}: expected an object", hint=_HINT)
            return dict(value)

        breakers = data.get("breakers") or []
        if not isinstance(breakers, list) or not all(isinstance(b, Mapping) for b in breakers):
            raise InputError(f"{where}: breakers: expected a list of objects", hint=_HINT)
        simulation = data.get("simulation")
        if simulation is not None and not isinstance(simulation, Mapping):
            raise InputError(f"{where}: simulation: expected an object or null", hint=_HINT)
        return cls(
            schema_version=version,
            tool=str(data.get("tool") or ""),
            created=str(data.get("created") or ""),
            inputs=section("inputs"),
            tokenizer=tokenizer,
            tokenizers=tokenizers or (tokenizer,),
            granularity=section("granularity"),
            privacy=section("privacy"),
            summary=summary,
            kinds=section("kinds"),
            candidates=candidates,
            rag=section("rag"),
            simulation=dict(simulation) if simulation is not None else None,
            breakers=tuple(dict(b) for b in breakers),
            errors=section("errors"),
        )
