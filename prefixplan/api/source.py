"""Where requests come from and how they become token ids: :func:`source_options` builds the
:class:`~prefixplan.render.stream.SourceOptions` every reading command takes, from paths, URLs or
in-memory records; :func:`executor` says where they render."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prefixplan.logs import ReadOptions, parse_time
from prefixplan.logs.tables import parse_columns
from prefixplan.render.stream import SourceOptions
from prefixplan.trace.executors import Executor

Inputs = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | Iterable[Mapping[str, Any]]


def source_options(
    inputs: Inputs | None = None,
    *,
    tokenizer: str | None = None,
    tokenizer_map: Mapping[str, str] | None = None,
    chat_template: str | os.PathLike[str] | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    log_format: str = "auto",
    since: str | float | None = None,
    until: str | float | None = None,
    sample: float | None = None,
    strict: bool = False,
    trace_block_size: int = 512,
    columns: str | Mapping[str, str] | None = None,
) -> SourceOptions:
    """Where requests come from and how they are tokenized (shared by analyze and simulate).

    Args:
        inputs: a path, glob or folder; several of them; or an iterable of log records (dicts
            such as OpenAI chat requests ``{"model", "messages", "tools"}``). Paths may be URLs:
            ``s3://``, ``gs://``, ``az://``, ``https://`` (needs ``prefixplan[s3]``, ``[gcs]``,
            ``[azure]`` or ``[http]``; credentials from the cloud's usual environment).
        tokenizer: ``hf:PATH``, ``mistral:nemo`` (default), ``tiktoken:NAME`` or ``vllm:URL``.
        tokenizer_map: ``{model: spec}`` for logs that mix models.
        chat_template: a Jinja chat template file overriding an ``hf:`` tokenizer's.
        template_kwargs: extra chat-template variables (e.g. ``{"date_string": "26 Jul 2024"}``).
        log_format: ``auto`` or one log format (``openai-chat``, ``anthropic``, ``mooncake``, ...).
        since, until: keep requests in this time window (ISO-8601 or epoch seconds).
        sample: keep this deterministic fraction of lines.
        strict: raise on the first malformed line instead of counting it.
        trace_block_size: tokens per block of Mooncake ``hash_ids`` traces.
        columns: the column of each request field in Parquet and CSV logs, e.g.
            ``{"messages": "request.messages", "timestamp": "ts"}`` or ``"messages=request.messages,timestamp=ts"``.

    Where rendering runs is :func:`executor`'s.
    """
    from prefixplan.errors import UsageError

    if sample is not None and not 0 < sample <= 1:
        raise UsageError("--sample must be in (0, 1]", hint="e.g. --sample 0.1 keeps one line in ten")
    read = ReadOptions(
        format=log_format,
        since=_time(since),
        until=_time(until),
        sample=sample,
        strict=strict,
        trace_block_size=trace_block_size,
        columns=parse_columns(columns),
    )
    paths: tuple[str, ...] = ()
    objects: list[Any] | None = None
    if isinstance(inputs, (str, os.PathLike)):
        paths = (os.fspath(inputs),)
    elif inputs is not None:
        items = list(inputs)
        if items and all(isinstance(i, (str, os.PathLike)) for i in items):
            paths = tuple(os.fspath(i) for i in items)  # type: ignore[arg-type]
        else:
            objects = items
    if not paths and objects is None:
        raise UsageError("no input: pass log paths or an iterable of request records")
    return SourceOptions(
        paths=paths,
        objects=objects,
        read=read,
        tokenizer=tokenizer,
        tokenizer_map=dict(tokenizer_map or {}),
        chat_template=os.fspath(chat_template) if chat_template is not None else None,
        template_kwargs=dict(template_kwargs or {}),
    )


def executor(workers: int | None = None, kind: str = "local", ray_address: str | None = None) -> Executor:
    """Where rendering runs (:class:`~prefixplan.trace.executors.Executor`).

    Args:
        workers: render in this many processes (None: one per core for inputs of 4 MiB and more;
            1: in this process).
        kind: ``"local"`` (processes here) or ``"ray"`` (one actor per input file on a Ray
            cluster; needs ``prefixplan[ray]``; ``workers`` then sizes the actor pool, default one
            per cluster CPU). The record is the same either way.
        ray_address: the Ray cluster to join (``auto``, ``ray://HOST:10001``; default
            ``RAY_ADDRESS``, else a new local cluster).
    """
    return Executor(kind, workers, ray_address)


def _time(value: str | float | None) -> float | None:
    if value is None:
        return None
    return float(value) if isinstance(value, (int, float)) else parse_time(value)
