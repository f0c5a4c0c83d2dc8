"""The shown candidates' token ids, from rendering their representative requests again.

The analysis keeps no token arrays: each shown candidate names one request (its
representative) by source and line, and this module reads the log again up to the last such line
and renders only those requests. It also owns how a run records its source options in a trace
file's metadata (:func:`source_json`) and how they are rebuilt from it, so that the analysis of a
trace can still show token ids while its log exists.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from prefixplan.analysis.candidates import Candidate
from prefixplan.analysis.record import ExampleRef
from prefixplan.core.types import Request
from prefixplan.errors import UsageError
from prefixplan.logs import LineErrors
from prefixplan.render import RenderSet
from prefixplan.render.stream import SourceOptions, iter_source_requests
from prefixplan.trace.blocks import BlockTrace


def source_json(source: SourceOptions) -> dict[str, Any] | None:
    """How to read and render the log again (a trace's representatives), or None for records
    given in memory."""
    if source.objects is not None:
        return None
    return {
        "paths": list(source.paths),
        "read": {
            "format": source.read.format,
            "since": source.read.since,
            "until": source.read.until,
            "sample": source.read.sample,
            "trace_block_size": source.read.trace_block_size,
        },
        "tokenizer": source.tokenizer,
        "tokenizer_map": dict(source.tokenizer_map or {}),
        "chat_template": str(source.chat_template) if source.chat_template else None,
        "template_kwargs": dict(source.template_kwargs or {}),
    }


def representative_tokens(
    source: SourceOptions,
    trace: BlockTrace,
    places: Mapping[int, ExampleRef],
    shown: Sequence[Candidate],
    renderers: RenderSet | None,
    meta: Mapping[str, Any] | None,
) -> dict[int, np.ndarray]:
    """Token ids of each shown candidate (``{candidate id: ids}``), from rendering its
    representative request again (``places``: where each candidate's is in the log): the log is
    read up to the last such line, and only those lines are rendered. A trace file's log is used when the file still exists; when the input cannot be
    read again (stdin), no ids (the record still has every count)."""
    if meta is not None:
        again = _source_from_meta(meta)
        if again is None:
            return {}
        source, renderers = again, None
    elif not source.rereadable:
        return {}
    want: dict[tuple[str, int], list[Candidate]] = defaultdict(list)
    for cand in shown:
        ref = places[cand.id]
        want[(ref.source, ref.line)].append(cand)
    if not want:
        return {}
    try:
        renderers = renderers or source.renderers()
        found = _requests_at(source, set(want))
        out: dict[int, np.ndarray] = {}
        for prompt in renderers.render_stream(found, on_error=lambda req, exc: None):
            for cand in want.get((prompt.request.source, prompt.request.line_no), ()):
                unit = int(trace.unit_tokens[cand.request_index])
                out[cand.id] = np.asarray(prompt.tokens[: cand.length // unit])
        return out
    except (OSError, UsageError):
        return {}


def _requests_at(source: SourceOptions, wanted: set[tuple[str, int]]) -> list[Request]:
    """The requests of ``source`` read at the given (source, line) places (in a log file only
    those lines are parsed: :func:`~prefixplan.logs.lines_at.requests_at`)."""
    if source.objects is None:
        from prefixplan.logs.lines_at import requests_at

        return requests_at(source.paths, source.read, wanted)
    found = []
    for req in iter_source_requests(source, LineErrors()):
        if (req.source, req.line_no) in wanted:
            found.append(req)
            if len(found) == len(wanted):
                break
    return found


def _source_from_meta(meta: Mapping[str, Any]) -> SourceOptions | None:
    """The log a trace was written from, when it can still be read."""
    from prefixplan.logs import ReadOptions

    inputs = meta.get("inputs")
    src = inputs.get("source") if isinstance(inputs, Mapping) else None
    if not isinstance(src, Mapping) or not src.get("paths"):
        return None
    paths = [str(p) for p in src["paths"]]
    if not all(p != "-" and os.path.exists(p) for p in paths):
        return None
    read = src.get("read") or {}
    return SourceOptions(
        paths=tuple(paths),
        read=ReadOptions(
            format=read.get("format", "auto"),
            since=read.get("since"),
            until=read.get("until"),
            sample=read.get("sample"),
            trace_block_size=int(read.get("trace_block_size") or 512),
        ),
        tokenizer=src.get("tokenizer"),
        tokenizer_map=dict(src.get("tokenizer_map") or {}),
        chat_template=src.get("chat_template"),
        template_kwargs=dict(src.get("template_kwargs") or {}),
    )
