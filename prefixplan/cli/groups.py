"""The options every command that reads logs shares, declared once.

A command declares parameters ``source: SourceOptions`` and ``executor: Executor`` and is
decorated with :func:`with_source`: its help then lists the reading and tokenizer options (after
``LOG...``, or after ``reading_after``) and the execution options (after ``execution_after``), and
the command receives one :class:`~prefixplan.render.stream.SourceOptions` and one
:class:`~prefixplan.trace.executors.Executor` built from their values::

    @with_source(execution_after="trace_out")
    def simulate(logs: o.Logs, source: SourceOptions, executor: Executor, ..., trace_out: o.TraceOut = None): ...
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from prefixplan.cli import options as o

_KIND = inspect.Parameter.POSITIONAL_OR_KEYWORD
READING: tuple[tuple[str, Any, Any], ...] = (
    ("log_format", o.LogFormat, "auto"),
    ("columns", o.Columns, None),
    ("since", o.Since, None),
    ("until", o.Until, None),
    ("sample", o.Sample, None),
    ("strict", o.Strict, False),
    ("trace_block_size", o.TraceBlock, 512),
    ("tokenizer", o.Tokenizer, None),
    ("tokenizer_map", o.TokenizerMap, None),
    ("chat_template", o.ChatTemplate, None),
    ("template_kwargs", o.TemplateKwargs, None),
)
"""Where requests come from and how they are tokenized: (parameter, option, default)."""
EXECUTION: tuple[tuple[str, Any, Any], ...] = (
    ("workers", o.Workers, None),
    ("executor", o.Executor, "local"),
    ("ray_address", o.RayAddress, None),
)
"""Where rendering runs: (parameter, option, default)."""


def _params(group: tuple[tuple[str, Any, Any], ...]) -> list[inspect.Parameter]:
    return [inspect.Parameter(name, _KIND, default=default, annotation=ann) for name, ann, default in group]


def build_source(logs: list[str], values: dict[str, Any]) -> Any:
    """The :class:`~prefixplan.render.stream.SourceOptions` of ``logs`` and the group's values."""
    from prefixplan.api import source_options
    from prefixplan.render import parse_template_kwargs, parse_tokenizer_map

    return source_options(
        logs,
        tokenizer=values["tokenizer"],
        tokenizer_map=parse_tokenizer_map(values["tokenizer_map"] or []),
        chat_template=values["chat_template"],
        template_kwargs=parse_template_kwargs(values["template_kwargs"]),
        log_format=values["log_format"],
        since=values["since"],
        until=values["until"],
        sample=values["sample"],
        strict=values["strict"],
        trace_block_size=values["trace_block_size"],
        columns=values["columns"],
    )


def build_executor(values: dict[str, Any]) -> Any:
    """The :class:`~prefixplan.trace.executors.Executor` of the execution options' values."""
    from prefixplan.api import executor

    return executor(values["workers"], values["executor"], values["ray_address"])


def with_source(*, execution_after: str, reading_after: str = "logs") -> Callable[[Callable[..., Any]], Any]:
    """Give the command the shared log options in place of its ``source`` parameter (module docstring)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        params = []
        for p in inspect.signature(fn).parameters.values():
            if p.name in ("source", "executor"):  # built here; their types are for readers and checkers
                continue
            ann = eval(p.annotation, fn.__globals__) if isinstance(p.annotation, str) else p.annotation
            params.append(p.replace(annotation=ann))
            if p.name == reading_after:
                params.extend(_params(READING))
            if p.name == execution_after:
                params.extend(_params(EXECUTION))
        names = [name for name, _, _ in READING + EXECUTION]

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name in names}
            kwargs["executor"] = build_executor(values)
            kwargs["source"] = build_source(kwargs["logs"], values)
            return fn(**kwargs)

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        del command.__wrapped__  # typer reads this signature, not the function's own
        return command

    return decorate
