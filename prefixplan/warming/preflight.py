"""Pre-flight of a fleet: connect, read model and block size, compare each replica's tokenizer with
the analysis tokenizer (probe text through ``/tokenize``), and make replicas agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from prefixplan.analysis.record import TokenizerInfo
from prefixplan.engines.base import TOKENIZER_PROBE_TEXT, EngineAdapter
from prefixplan.engines.endpoint import Endpoint
from prefixplan.engines.retries import with_retries
from prefixplan.errors import EndpointError, PrefixplanError
from prefixplan.warming.results import ReplicaInfo, WarmOptions

Connector = Callable[[Endpoint, WarmOptions], EngineAdapter]


def default_connector(endpoint: Endpoint, options: WarmOptions) -> EngineAdapter:
    from prefixplan.engines.detect import connect

    return connect(
        endpoint, engine=options.engine, timeout=options.timeout, model=options.model, block_size=options.block_size
    )


def expected_probe_ids(tokenizer: TokenizerInfo | None) -> tuple[list[int] | None, str]:
    """Probe ids of the analysis tokenizer: stored ``probe_ids``, else rendered from its spec."""
    if not tokenizer:
        return None, "the analysis names no tokenizer"
    stored = list(tokenizer.probe_ids) if tokenizer.probe_ids is not None else None
    if isinstance(stored, list):
        return [int(i) for i in stored], "stored"
    spec = tokenizer.spec
    if not spec:
        return None, "the analysis tokenizer has no spec"
    try:
        from prefixplan.render import load_renderer

        ids, _ = load_renderer(str(spec)).encode_text(TOKENIZER_PROBE_TEXT, add_special_tokens=False)
    except (PrefixplanError, ImportError, OSError) as err:
        return None, f"cannot load the analysis tokenizer {spec}: {err}"
    return [int(i) for i in ids], "rendered"


def _describe_tokenizer(tokenizer: TokenizerInfo | None) -> str:
    if not tokenizer:
        return "the analysis tokenizer"
    label = tokenizer.label or tokenizer.spec or "?"
    fp = tokenizer.fingerprint
    return f"analysis tokenizer {label}" + (f" ({fp})" if fp else "")


def _first_diff(a: Sequence[int], b: Sequence[int]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"first difference at token {i}: server {x} vs analysis {y}"
    return f"lengths differ: server {len(a)} vs analysis {len(b)} tokens"


class Replica:
    """Mutable per-replica state during a run (adapter, dead flag)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.adapter: EngineAdapter | None = None
        self.info = ReplicaInfo(endpoint=endpoint.label)
        self.probe_ids: list[int] | None = None
        self.dead: str | None = None
        self.via_chat = False  # learned: the server takes no token-id prompts
        self.via_chat_reason = ""


def preflight(
    rep: Replica,
    options: WarmOptions,
    connector: Connector,
    expected: list[int] | None,
    why_unchecked: str,
    tokenizer: TokenizerInfo | None,
) -> None:
    try:
        adapter = with_retries(
            lambda: connector(rep.endpoint, options), retries=options.retries, backoff=options.backoff
        )
        rep.adapter = adapter
        if options.cache_salt:
            adapter.body_fields = {options.salt_field: options.cache_salt}
        info = with_retries(adapter.server_info, retries=options.retries, backoff=options.backoff)
        if not info.model:
            raise EndpointError(f"{rep.endpoint.label}: serves no model (empty /v1/models)")
        probe = with_retries(
            lambda: adapter.tokenize_text(TOKENIZER_PROBE_TEXT), retries=options.retries, backoff=options.backoff
        )
        rep.probe_ids = probe
        if probe is None:
            check = "unchecked: the server offers no /tokenize"
        elif expected is None:
            check = f"unchecked: {why_unchecked}"
        elif list(probe) == list(expected):
            check = "match"
        else:
            rep.info = ReplicaInfo(
                endpoint=rep.endpoint.label,
                engine=info.engine,
                model=info.model,
                block_size=info.block_size,
                block_size_source=info.block_size_source,
                tokenizer_check="mismatch",
                error=(
                    f"tokenizer mismatch: server model {info.model} tokenizes the probe text differently from "
                    f"{_describe_tokenizer(tokenizer)}; {_first_diff(probe, expected)}"
                ),
            )
            return
        rep.info = ReplicaInfo(
            endpoint=rep.endpoint.label,
            engine=info.engine,
            model=info.model,
            block_size=info.block_size,
            block_size_source=info.block_size_source,
            tokenizer_check=check,
        )
    except PrefixplanError as err:
        rep.info = replace(
            rep.info, error=str(err) if str(err).startswith(rep.endpoint.label) else f"{rep.endpoint.label}: {err}"
        )


def fleet_agreement(reps: list[Replica]) -> None:
    """Replicas must serve the same model with the same tokenizer: the first healthy one is the reference."""
    healthy = [r for r in reps if r.info.error is None]
    if len(healthy) < 2:
        return
    ref = healthy[0]
    for r in healthy[1:]:
        if r.info.model != ref.info.model:
            r.info = replace(
                r.info,
                error=(
                    f"replicas disagree on the model: {r.endpoint.label} serves {r.info.model}, "
                    f"{ref.endpoint.label} serves {ref.info.model}"
                ),
            )
        elif r.probe_ids is not None and ref.probe_ids is not None and r.probe_ids != ref.probe_ids:
            r.info = replace(
                r.info,
                tokenizer_check="mismatch",
                error=(
                    f"replicas disagree on the tokenizer: {r.endpoint.label} and {ref.endpoint.label} tokenize the "
                    f"probe differently ({_first_diff(r.probe_ids, ref.probe_ids)})"
                ),
            )
