"""Pinned and hot prefixes taken from an analysis record (``prefixplan analyze --json``).

``prefixplan simulate LOG --analysis ANALYSIS.json --pin-top N`` pins the token ids of the
top-N candidates (by ``rank``) in the pinned partition and uses them as the hot prefixes of
the eviction-risk table. Candidates whose ``token_ids`` the privacy rule withheld
(``null``) are skipped with a note. Token ids only mean something for the tokenizer that
produced them, so :func:`check_fingerprints` compares the record's tokenizer fingerprint with
the renderer the simulation uses for each pinned namespace and refuses a mismatch (pins from
another tokenizer would silently never match).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from prefixplan.analysis.record_io import load_record
from prefixplan.errors import InputError, UsageError

if TYPE_CHECKING:
    from prefixplan.render import RenderSet


@dataclass(frozen=True, slots=True)
class PinnedPrefix:
    """One candidate to pin.

    Attributes:
        rank: the candidate's rank in the analysis (1 = most valuable).
        label: display label, e.g. ``#1 system-tools@v1`` (key when the record has one).
        namespace: cache namespace (model|lora|salt) the tokens belong to.
        tokens: token ids (uint32); Mooncake analyses hold block hash ids.
    """

    rank: int
    label: str
    namespace: str
    tokens: np.ndarray

    @property
    def model(self) -> str:
        return self.namespace.split("|", 1)[0]


@dataclass(frozen=True, slots=True)
class PinSelection:
    """Pins read from an analysis record.

    Attributes:
        source: path of the record.
        prefixes: the pinned prefixes in rank order.
        fingerprints: tokenizer fingerprints the record's token ids come from (empty for
            block-level traces, whose ids are hash ids).
        tokenizer_labels: ``spec (fingerprint)`` per record tokenizer, for messages.
        notes: what was skipped and why.
    """

    source: str
    prefixes: tuple[PinnedPrefix, ...]
    fingerprints: frozenset[str]
    tokenizer_labels: tuple[str, ...]
    notes: tuple[str, ...]

    def pins(self) -> tuple[tuple[str, np.ndarray], ...]:
        """``(namespace, tokens)`` pairs for :class:`~prefixplan.simulation.simulator.SimConfig.pins`."""
        return tuple((p.namespace, p.tokens) for p in self.prefixes)

    def hot_prefixes(self) -> tuple[tuple[str, str, np.ndarray], ...]:
        """``(label, namespace, tokens)`` for the eviction-risk table."""
        return tuple((p.label, p.namespace, p.tokens) for p in self.prefixes)


def load_pins(path: str | Path, top: int) -> PinSelection:
    """The top-``top`` candidates of the analysis record at ``path`` (withheld ones skipped)."""
    if top < 1:
        raise UsageError("--pin-top needs N >= 1")
    if not Path(path).is_file():
        raise InputError(f"--analysis {path}: file not found", hint="write one with prefixplan analyze LOG --json FILE")
    record = load_record(path)
    tokenizers = [t for t in record.tokenizers if t.fingerprint]
    fps = frozenset(str(t.fingerprint) for t in tokenizers)
    labels = tuple(f"{t.spec} ({t.fingerprint})" for t in tokenizers)
    cands = sorted(record.candidates, key=lambda c: c.rank)
    notes: list[str] = []
    out: list[PinnedPrefix] = []
    for c in cands[:top]:
        label = f"#{c.rank} {c.key or c.name or c.label or 'prefix'}"
        if c.token_ids is None:
            notes.append(f"pin {label} skipped: its token ids were withheld by the privacy rule (min_tenants)")
            continue
        if not c.token_ids:
            notes.append(f"pin {label} skipped: no token ids")
            continue
        out.append(PinnedPrefix(c.rank, label, c.namespace or c.model or "", np.asarray(c.token_ids, dtype=np.uint32)))
    if len(cands) < top:
        notes.append(f"--pin-top {top}: the record has only {len(cands)} candidates")
    if not fps and out:
        notes.append("pins come from a block-level trace analysis: their ids are trace hash ids")
    return PinSelection(str(path), tuple(out), fps, labels, tuple(notes))


def check_fingerprints(selection: PinSelection, renderers: RenderSet) -> None:
    """Raise :class:`UsageError` when a pinned namespace is rendered with another tokenizer
    than the one the record's token ids come from."""
    if not selection.fingerprints:
        return
    for prefix in selection.prefixes:
        renderer = renderers.for_model(prefix.model or None)
        if renderer.fingerprint not in selection.fingerprints:
            raise UsageError(
                f"--analysis {selection.source}: its token ids come from tokenizer "
                f"{', '.join(selection.tokenizer_labels)}, but this simulation renders {prefix.model or 'the log'} "
                f"with {renderer.spec} ({renderer.fingerprint}); pinned ids would never match",
                hint="pass the same --tokenizer (and --tokenizer-map) as the analysis",
            )
