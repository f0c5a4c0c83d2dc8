"""The shared front half of every pipeline: where requests come from and how they are tokenized.

:class:`SourceOptions` says it; every command that reads logs embeds it and reads through
:class:`prefixplan.trace.intake.Intake` (where rendering runs is the separate
:class:`~prefixplan.trace.executors.Executor`). Requests the renderer rejects are counted with the
malformed lines (reason ``render: ...``) and listed as :class:`RenderFailure`; with ``read.strict``
they raise.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefixplan.core.types import Request
from prefixplan.logs import LineErrors, ReadMeter, ReadOptions, expand_paths, iter_objects, iter_requests
from prefixplan.logs.remote import shown
from prefixplan.render import RenderSet


@dataclass(frozen=True)
class SourceOptions:
    """Where requests come from and how they become token ids.

    Attributes:
        paths: log files, globs, folders or ``-`` (stdin).
        objects: in-memory log records instead of paths (OpenAI chat request dicts, any format
            the log reader knows, or :class:`~prefixplan.core.types.Request` records).
        read: format, time window, sampling, strictness.
        tokenizer: renderer spec (``hf:PATH``, ``mistral:nemo``, ``tiktoken:NAME``, ``vllm:URL``).
        tokenizer_map: ``model -> spec`` for logs that mix models.
        chat_template: a Jinja template file overriding an ``hf:`` tokenizer's.
        template_kwargs: extra chat-template variables.
        render_batch: requests rendered together (cache misses are encoded in one call).
    """

    paths: tuple[str, ...] = ()
    objects: Sequence[Any] | None = None
    read: ReadOptions = field(default_factory=ReadOptions)
    tokenizer: str | None = None
    tokenizer_map: dict[str, str] = field(default_factory=dict)
    chat_template: str | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    render_batch: int = 256

    def __post_init__(self) -> None:
        self.renderers()  # a spec with credentials is refused before anything is read

    @property
    def rereadable(self) -> bool:
        """True when the input can be read a second time (not stdin)."""
        return self.objects is not None or "-" not in self.paths

    @property
    def display(self) -> tuple[str, ...]:
        """What to call the inputs in reports (URLs without credentials or signatures)."""
        return tuple(shown(p) for p in self.paths) if self.objects is None else ("<memory>",)

    def renderers(self) -> RenderSet:
        """A fresh :class:`RenderSet` for these options (renderers load lazily)."""
        return RenderSet(self.tokenizer, dict(self.tokenizer_map), self.chat_template, dict(self.template_kwargs))


@dataclass(frozen=True, slots=True)
class RenderFailure:
    """A request the renderer rejected (also counted as a line error)."""

    source: str
    line_no: int
    reason: str


def iter_source_requests(
    source: SourceOptions, errors: LineErrors, meter: ReadMeter | None = None
) -> Iterator[Request]:
    """The requests of ``source`` in input order (malformed lines counted in ``errors``)."""
    if source.objects is not None:
        return iter_objects(source.objects, source.read, errors)
    return iter_requests(expand_paths(source.paths), source.read, errors, meter)


def source_meter(source: SourceOptions, expanded: Sequence[str] | None = None) -> ReadMeter | None:
    """A byte meter over ``source``'s files (None for in-memory records; ``expanded``: its paths
    already expanded)."""
    if source.objects is not None:
        return None
    return ReadMeter.for_paths(expand_paths(source.paths) if expanded is None else expanded)
