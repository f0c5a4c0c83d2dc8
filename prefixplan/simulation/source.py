"""From rendered prompts to :class:`~prefixplan.simulation.trace.SimRequest`, and the simulation of a source.

Logs are read and rendered exactly as ``prefixplan analyze`` does (the shared
:func:`prefixplan.render.stream.iter_prompts`), then replayed by
:func:`prefixplan.simulation.api.simulate`. Requests without a timestamp use their position in the
stream as the arrival time. Anthropic ``cache_control`` markers become token offsets: the end of
the system segment, of the marked tool schema, or of the marked message (approximate, like every
Anthropic rendering).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

from prefixplan.core.hashes import segment_hash
from prefixplan.core.progress import NO_PROGRESS, Progress
from prefixplan.core.types import Prompt
from prefixplan.logs import LineErrors
from prefixplan.render.stream import SourceOptions, iter_prompts, source_meter
from prefixplan.simulation.api import simulate
from prefixplan.simulation.config import SimConfig
from prefixplan.simulation.result import SimResult
from prefixplan.simulation.router import request_route_bytes, route_units
from prefixplan.simulation.trace import SimRequest

_MESSAGE_KINDS = ("user", "assistant", "tool_result")


def breakpoint_offsets(prompt: Prompt) -> tuple[int, ...]:
    """Token offsets (prefix lengths) of a request's ``cache_control`` breakpoints."""
    req = prompt.request
    if not req.breakpoints:
        return ()
    segs = prompt.segments
    messages = sorted({s.index for s in segs if s.kind in _MESSAGE_KINDS})
    out = set()
    for bp in req.breakpoints:
        if bp.where == "system":
            ends = [s.end for s in segs if s.kind == "system"]
        elif bp.where == "tools":
            ends = [s.end for s in segs if s.kind == "tool" and s.index == bp.index] or [
                s.end for s in segs if s.kind == "tool"
            ]
        else:
            idx = messages[bp.index] if 0 <= bp.index < len(messages) else None
            ends = [s.end for s in segs if s.kind in _MESSAGE_KINDS and s.index == idx]
        if ends:
            out.add(max(ends))
    return tuple(sorted(out))


def key_prefix(prompt: Prompt) -> tuple[str | None, int]:
    """``(identity, tokens)`` of a chat prompt's leading system/tool prefix, up to where the first
    user message's content starts (what a gateway key registers); ``(None, 0)`` without one."""
    users = [s.start for s in prompt.segments if s.kind == "user"]
    if not users:
        return None, 0
    cut = min(users)
    if not any(s.kind in ("system", "tool") and s.end <= cut for s in prompt.segments):
        return None, 0
    ident = segment_hash(prompt.request.namespace.encode() + b"\x00" + prompt.tokens[:cut].tobytes())
    return f"prefix-{ident}", cut


def sim_request(prompt: Prompt, index: int, *, routing: bool = False) -> SimRequest:
    """One rendered prompt as simulation input (``index``: its position in the stream); with
    ``routing``, also what the fleet's router sees (route units, key prefix)."""
    req = prompt.request
    units: tuple[int, ...] | None = None
    key, key_tokens = None, 0
    if routing:
        if req.messages is not None or req.prompt is not None or req.prompt_ids is not None:
            prompt_value = req.prompt if req.prompt is not None else (list(req.prompt_ids) if req.prompt_ids else None)
            units = tuple(route_units(request_route_bytes(req.messages, req.tools, prompt_value)))
        key, key_tokens = key_prefix(prompt)
    return SimRequest(
        time=float(req.time) if req.time is not None else float(index),
        namespace=req.namespace,
        tokens=prompt.tokens,
        output_len=int(req.output_length or 0),
        breakpoints=breakpoint_offsets(prompt),
        block_scale=int(prompt.token_scale or 1),
        index=index,
        route_units=units,
        key=key,
        key_tokens=key_tokens,
    )


def sim_requests(prompts: Iterable[Prompt], *, routing: bool = False) -> Iterator[SimRequest]:
    """Rendered prompts as simulation input, in stream order."""
    for i, prompt in enumerate(prompts):
        yield sim_request(prompt, i, routing=routing)


def simulate_source(
    source: SourceOptions,
    config: SimConfig,
    *,
    pins_from: str | Path | None = None,
    pin_top: int = 10,
    progress: Progress = NO_PROGRESS,
) -> tuple[SimResult, LineErrors]:
    """Read, render and simulate ``source``; returns (result, line errors).

    With ``pins_from`` (an analysis record), its top ``pin_top`` candidates become the pins
    of the pinned partition and the hot prefixes of the eviction-risk table; their tokenizer
    fingerprint must match the renderer used here (:class:`UsageError` otherwise).
    """
    from prefixplan.simulation.pins import check_fingerprints, load_pins

    renderers = source.renderers()
    if pins_from is not None:
        selection = load_pins(pins_from, pin_top)
        check_fingerprints(selection, renderers)
        notes = list(selection.notes)
        if not selection.prefixes:
            notes.append(f"no pins: none of the top {pin_top} candidates of {pins_from} has token ids")
        else:
            notes.append(
                f"pinned {len(selection.prefixes)} prefixes from {pins_from}: "
                + ", ".join(p.label for p in selection.prefixes)
            )
        config = replace(
            config,
            cache=replace(config.cache, pins=selection.pins()),
            workload=replace(config.workload, hot_prefixes=selection.hot_prefixes()),
            notes=config.notes + tuple(notes),
        )
    errors = LineErrors()
    routing = config.fleet is not None
    meter = source_meter(source)

    def reported(prompts: Iterable[Prompt]) -> Iterator[Prompt]:
        progress.begin("reading and rendering", meter.total_bytes if meter is not None else None)
        tokens = n = 0
        for n, prompt in enumerate(prompts, start=1):
            tokens += prompt.n_tokens
            if n % 256 == 1:
                progress.update(n, tokens, meter.done() if meter is not None else None)
            yield prompt
        progress.update(n, tokens, meter.done() if meter is not None else None)
        progress.end()
        progress.begin("simulating the cache models")

    prompts = reported(iter_prompts(source, errors, renderers, meter=meter))
    result = simulate(sim_requests(prompts, routing=routing), config)
    progress.end()
    return result, errors
