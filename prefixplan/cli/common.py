"""Option types shared by commands that read logs (analyze, simulate, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

Logs = Annotated[
    list[str], typer.Argument(help="Log files, globs or - for stdin (.gz/.zst read transparently).", show_default=False)
]
Format = Annotated[
    str,
    typer.Option(
        "--format", help="Log format: auto, openai-chat, openai-completion, openai-batch, raw, anthropic, mooncake."
    ),
]
Since = Annotated[
    Optional[str], typer.Option("--since", help="Keep requests at or after this time (ISO-8601 or epoch seconds).")
]
Until = Annotated[Optional[str], typer.Option("--until", help="Keep requests before this time.")]
Sample = Annotated[
    Optional[float], typer.Option("--sample", help="Keep this deterministic fraction of lines, e.g. 0.1.")
]
Strict = Annotated[bool, typer.Option("--strict", help="Fail on the first malformed line instead of counting it.")]
TraceBlock = Annotated[int, typer.Option("--trace-block-size", help="Tokens per block of Mooncake hash_ids traces.")]
Tokenizer = Annotated[
    Optional[str],
    typer.Option(
        "--tokenizer",
        "-t",
        help="hf:PATH | mistral:nemo (default) | tiktoken:NAME | vllm:URL",
        envvar="PREFIXPLAN_TOKENIZER",
    ),
]
TokenizerMap = Annotated[
    Optional[list[str]], typer.Option("--tokenizer-map", help="MODEL=SPEC for logs that mix models (repeatable).")
]
ChatTemplate = Annotated[
    Optional[Path],
    typer.Option("--chat-template", help="Jinja chat template file overriding the tokenizer's (hf: only)."),
]
TemplateKwargs = Annotated[
    Optional[str],
    typer.Option("--template-kwargs", help='Extra template variables: JSON or k=v,... e.g. date_string="26 Jul 2024".'),
]
Engine = Annotated[
    str, typer.Option("--engine", help="Granularity preset: vllm (block 16), sglang (page 1), lmcache (chunk 256).")
]
BlockSize = Annotated[
    Optional[int], typer.Option("--block-size", help="Cache block/page size in tokens (overrides --engine).")
]


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
    )
