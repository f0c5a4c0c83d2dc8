"""From request logs to :class:`~prefixplan.simulate.trace.SimRequest` (the analyze front half).

Logs are read and rendered exactly as ``prefixplan analyze`` does (same readers,
tokenizers and options), then replayed by :func:`prefixplan.simulate.api.simulate`.
Requests without a timestamp use their position in the stream as the arrival time.
Anthropic ``cache_control`` markers become token offsets: the end of the system segment,
of the marked tool schema, or of the marked message (approximate, like every Anthropic
rendering).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prefixplan.simulate.trace import SimRequest

if TYPE_CHECKING:
    from prefixplan.analysis.pipeline import AnalyzeOptions
    from prefixplan.logs import LineErrors
    from prefixplan.simulate.api import SimConfig, SimResult
    from prefixplan.core.types import Prompt

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
            ends = [s.end for s in segs if s.kind == "tool" and s.index == bp.index] or \
                   [s.end for s in segs if s.kind == "tool"]
        else:
            idx = messages[bp.index] if 0 <= bp.index < len(messages) else None
            ends = [s.end for s in segs if s.kind in _MESSAGE_KINDS and s.index == idx]
        if ends:
            out.add(max(ends))
    return tuple(sorted(out))


def sim_requests(prompts: Iterable[Prompt]) -> Iterator[SimRequest]:
    """Rendered prompts as simulation input, in stream order."""
    for i, prompt in enumerate(prompts):
        req = prompt.request
        yield SimRequest(
            time=float(req.time) if req.time is not None else float(i),
            namespace=req.namespace,
            tokens=prompt.tokens,
            output_len=int(req.output_length or 0),
            breakpoints=breakpoint_offsets(prompt),
            block_scale=int(getattr(prompt, "token_scale", 1) or 1),
            index=i,
        )


def simulate_logs(
    options: AnalyzeOptions,
    config: SimConfig,
    *,
    pins_from: str | Path | None = None,
    pin_top: int = 10,
) -> tuple[SimResult, LineErrors]:
    """Read, render and simulate the logs named by ``options``; returns (result, line errors).

    With ``pins_from`` (an analysis record), its top ``pin_top`` candidates become the pins
    of the pinned partition and the hot prefixes of the eviction-risk table; their tokenizer
    fingerprint must match the renderer used here (:class:`UsageError` otherwise).
    """
    from dataclasses import replace

    from prefixplan.analysis.pipeline import iter_prompts
    from prefixplan.logs import LineErrors
    from prefixplan.render import RenderSet
    from prefixplan.simulate.api import simulate
    from prefixplan.simulate.pins import check_fingerprints, load_pins

    renderers = RenderSet(options.tokenizer, dict(options.tokenizer_map), options.chat_template,
                          dict(options.template_kwargs))
    if pins_from is not None:
        selection = load_pins(pins_from, pin_top)
        check_fingerprints(selection, renderers)
        notes = list(selection.notes)
        if not selection.prefixes:
            notes.append(f"no pins: none of the top {pin_top} candidates of {pins_from} has token ids")
        else:
            notes.append(f"pinned {len(selection.prefixes)} prefixes from {pins_from}: "
                         + ", ".join(p.label for p in selection.prefixes))
        config = replace(config, pins=selection.pins(), hot_prefixes=selection.hot_prefixes(),
                         notes=config.notes + tuple(notes))
    errors = LineErrors()
    result = simulate(sim_requests(iter_prompts(options, errors, renderers)), config)
    return result, errors
