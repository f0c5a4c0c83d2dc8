"""The first pass's rows, found again by source and line: what a second pass over the same log
(the documents-first what-if) takes instead of rendering a request it leaves as it is.

The what-if rewrites about three requests in four of a RAG log; the others render to exactly the
tokens they had in the first pass. Their rows there already hold what the what-if's block trace
reads (prompt tokens, tokens per unit, the block keys at the analysis's granularity, kept in a
key store the first pass hands its :class:`~prefixplan.trace.blocks.TraceBuilder`), so the
what-if's workers send a reference row for each (:meth:`~prefixplan.trace.rows.RowMaker.reference`)
and :meth:`EarlierRows.fill` puts the first pass's values in its place, batch by batch, with array
operations.

A request is identified by its source and line. That names one row only where a line holds one
request, so the worker renders again (:attr:`EarlierRows.render_again`):

* the requests of a line that gave the first pass several rows (a completion with a list of
  prompts); past :data:`MAX_RENDER_AGAIN` such places, every request is rendered again
  (:attr:`EarlierRows.usable` is False);
* a request the first pass failed to render.

A reference with no first-pass row (the file grew between the passes) counts nothing: no tokens,
no blocks (:attr:`EarlierRows.unmatched` counts them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from prefixplan.analysis.rowstore import RowStore
from prefixplan.render.stream import RenderFailure
from prefixplan.trace.columns import Ragged, RowColumns
from prefixplan.trace.rows import REFERENCE_UNITS
from prefixplan.trace.storage.spill import RaggedU64

MAX_RENDER_AGAIN = 100_000
"""Places (source, line) the workers are told to render again, at most: each job carries them."""
_LINE_BITS = 40
"""Bits of a place key (:func:`_place`) that hold the line: a source's id is above them."""


def _place(source_ids: np.ndarray, lines: np.ndarray) -> np.ndarray:
    """One uint64 per (source id, line)."""
    return (source_ids.astype(np.uint64) << np.uint64(_LINE_BITS)) | lines.astype(np.uint64)


class EarlierRows:
    """The first pass's rows by (source, line) and its block keys (module docstring).

    Args:
        store: the first pass's row store (sources, lines, prompt tokens, tokens per unit).
        keys: its block keys, one array per row in the store's order.
        block_size: the analysis's block size in real tokens.
        failures: the requests the first pass could not render.
    """

    def __init__(self, store: RowStore, keys: RaggedU64, block_size: int, failures: Iterable[RenderFailure]) -> None:
        if len(keys) != len(store):
            raise ValueError(f"EarlierRows: {len(keys)} key arrays for {len(store)} rows")
        self.block_size = int(block_size)
        self.keys = keys
        c = store.columns()
        lines = np.asarray(c["line"], dtype=np.int64)
        sources = np.asarray(c["source"], dtype=np.int64)
        fits = bool(lines.shape[0] == 0 or (lines.min() >= 0 and lines.max() < (1 << _LINE_BITS)))
        places = _place(sources, lines) if fits else np.zeros(0, dtype=np.uint64)
        self._order = np.argsort(places, kind="stable")
        self._places = places[self._order]
        shared = np.zeros(self._places.shape[0], dtype=bool)  # a place that two or more rows share
        shared[1:] = self._places[1:] == self._places[:-1]
        shared[:-1] |= shared[1:]
        lines_shared = np.unique(self._places[shared])
        self._places, self._order = self._places[~shared], self._order[~shared]  # found by no reference
        again = {(f.source, int(f.line_no)) for f in failures}
        self.usable = fits and len(again) + lines_shared.shape[0] <= MAX_RENDER_AGAIN
        if self.usable:
            names = store.sources.names
            mask = (1 << _LINE_BITS) - 1
            again.update((names[place >> _LINE_BITS], place & mask) for place in lines_shared.tolist())
        self.render_again = frozenset(again)
        self._source_ids = dict(store.sources.ids)
        self._prompt = np.asarray(c["prompt"], dtype=np.int64)
        self._scale = np.maximum(np.asarray(c["scale"], dtype=np.int64), 1)
        self._units = np.asarray(c["units"], dtype=np.int64)
        self._lengths = keys.lengths()
        self.filled = 0
        """Reference rows given a first-pass row so far."""
        self.unmatched = 0
        """Reference rows with no first-pass row (they count nothing)."""

    def rows_of(self, sources: list[str | None], codes: np.ndarray, lines: np.ndarray) -> np.ndarray:
        """The first-pass row of each (``sources[codes[i]]``, ``lines[i]``), -1 where none."""
        ids = np.fromiter((self._source_ids.get(str(s), -1) for s in sources), dtype=np.int64, count=len(sources))
        sid = ids[codes] if ids.shape[0] else np.zeros(0, dtype=np.int64)
        found = np.full(sid.shape[0], -1, dtype=np.int64)
        ok = (sid >= 0) & (lines >= 0) & (lines < (1 << _LINE_BITS))
        if not self._places.shape[0] or not ok.any():
            return found
        want = _place(sid[ok], lines[ok])
        at = np.minimum(np.searchsorted(self._places, want), self._places.shape[0] - 1)
        hit = self._places[at] == want
        rows = np.where(hit, self._order[at], -1)
        found[ok] = rows
        return found

    def fill(self, cols: RowColumns) -> RowColumns:
        """``cols`` with each reference row's prompt tokens, units, tokens per unit and block
        keys (at the analysis's block size: one key per block) taken from its first-pass row."""
        ref = np.flatnonzero(cols.units == REFERENCE_UNITS)
        if not ref.shape[0]:
            return cols
        rows = self.rows_of(list(cols.source.values), cols.source.codes[ref], cols.line[ref])
        matched = rows >= 0
        self.filled += int(matched.sum())
        self.unmatched += int((~matched).sum())
        got, rows = ref[matched], rows[matched]
        prompt = cols.prompt_tokens.copy()
        units = cols.units.copy()
        scale = cols.token_scale.copy()
        keys_units = cols.keys_units.copy()
        units[ref] = 0
        prompt[got] = self._prompt[rows]
        units[got] = self._units[rows]
        scale[got] = self._scale[rows]
        keys_units[got] = np.maximum(self.block_size // self._scale[rows], 1)  # one key per block
        lengths = cols.block_keys.lengths.copy()
        lengths[got] = self._lengths[rows]
        offsets = np.zeros(cols.n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.empty(int(offsets[-1]), dtype=np.uint64)
        is_ref = np.zeros(cols.n, dtype=bool)
        is_ref[ref] = True
        from_earlier = np.repeat(is_ref, lengths)
        values[~from_earlier] = cols.block_keys.values  # a reference row came with no keys
        values[from_earlier] = self.keys.gather(rows)
        return replace(
            cols,
            prompt_tokens=prompt,
            units=units,
            token_scale=scale,
            keys_units=keys_units,
            block_keys=Ragged(offsets, values),
        )
