"""Option types shared by commands that read logs (analyze, simulate, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def source_options(
    logs: list[str],
    *,
    format: str = "auto",
    since: str | None = None,
    until: str | None = None,
    sample: float | None = None,
    strict: bool = False,
    trace_block_size: int = 512,
    tokenizer: str | None = None,
    tokenizer_map: list[str] | None = None,
    chat_template: Path | None = None,
    template_kwargs: str | None = None,
    workers: int | None = None,
    columns: str | None = None,
    executor: str = "local",
    ray_address: str | None = None,
) -> Any:
    """:class:`prefixplan.render.stream.SourceOptions` from the shared log/tokenizer options."""
    from prefixplan.api import source_options as build
    from prefixplan.render import parse_template_kwargs, parse_tokenizer_map

    return build(
        logs,
        tokenizer=tokenizer,
        tokenizer_map=parse_tokenizer_map(tokenizer_map or []),
        chat_template=chat_template,
        template_kwargs=parse_template_kwargs(template_kwargs),
        log_format=format,
        since=since,
        until=until,
        sample=sample,
        strict=strict,
        trace_block_size=trace_block_size,
        workers=workers,
        columns=columns,
        executor=executor,
        ray_address=ray_address,
    )
