"""Which 64-bit keys occur at least twice: a two-bit-per-slot filter with no false negatives.

A block key that occurs in only one request can never be reused, so the block trace need not
index it (:mod:`prefixplan.trace.blocks`). :class:`TwiceFilter` sees every key once (any order),
then answers "may this key occur twice?": a key that does is always reported (no false
negatives); a key seen once is reported only when another key lands in its slot (a false
positive, which costs an index entry and nothing else). Two bitsets of ``2**bits`` slots each
(``seen`` and ``twice``), updated a chunk at a time with sorts and reductions, no per-key Python.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

_MUL = np.uint64(0xD6E8FEB86659FD93)
MIN_BITS = 16
MAX_BITS = 30
"""At most 2**30 slots: two bitsets of 128 MiB each."""


SAMPLE_SHIFT = 6
""":func:`estimate_keys` looks at one key in ``2**SAMPLE_SHIFT`` (by a hash of the key)."""


def slot_bits(distinct_keys: int) -> int:
    """Slots for ``distinct_keys`` distinct keys: the power of two at or above 8 per key, within
    bounds (at most 1/8 of the slots are taken, so a key seen once shares a slot with a repeated
    one, a false positive, at most one time in eight)."""
    need = max(1, 8 * int(distinct_keys))
    return max(MIN_BITS, min(MAX_BITS, (need - 1).bit_length()))


MERGE_AT = 1 << 16
""":func:`estimate_keys` merges the sample's per-chunk counts once this many wait (or as many as
it holds merged already, whichever is more)."""


def estimate_keys(chunks: Iterable[np.ndarray]) -> tuple[int, int]:
    """About how many distinct keys ``chunks`` hold, and how many of them occur at least twice:
    the keys whose hash falls in one bucket of ``2**SAMPLE_SHIFT``, counted exactly, times that
    many (a hash sample: about 1/64 of the distinct keys kept with their counts, so a
    million-request log's 70M keys cost ~18 MB). A low estimate only makes a filter crowded (more
    false positives) or an index grow, never wrong."""
    shift = np.uint64(64 - SAMPLE_SHIFT)
    keys = np.zeros(0, dtype=np.uint64)
    counts = np.zeros(0, dtype=np.int64)
    waiting: list[tuple[np.ndarray, np.ndarray]] = []
    held = 0
    for chunk in chunks:
        chunk = np.asarray(chunk, dtype=np.uint64)
        with np.errstate(over="ignore"):
            picked = chunk[(chunk * _MUL) >> shift == 0]
        if picked.shape[0]:
            uniq, n = np.unique(picked, return_counts=True)
            waiting.append((uniq, n))
            held += uniq.shape[0]
        if held > max(MERGE_AT, keys.shape[0]):  # merge now and then: bounded by the sample
            keys, counts = _merge_counts(keys, counts, waiting)
            waiting, held = [], 0
    keys, counts = _merge_counts(keys, counts, waiting)
    return int(keys.shape[0]) << SAMPLE_SHIFT, int(np.count_nonzero(counts > 1)) << SAMPLE_SHIFT


def _merge_counts(
    keys: np.ndarray, counts: np.ndarray, more: list[tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct keys and their summed counts of ``(keys, counts)`` and ``more`` together."""
    if not more:
        return keys, counts
    k = np.concatenate([keys, *(m[0] for m in more)])
    c = np.concatenate([counts, *(m[1] for m in more)])
    order = np.argsort(k, kind="stable")
    k, c = k[order], c[order]  # not empty: ``more`` holds only samples with keys
    starts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
    return k[starts], np.add.reduceat(c, starts)


class TwiceFilter:
    """Keys seen at least twice (module docstring)."""

    def __init__(self, bits: int) -> None:
        self.bits = int(bits)
        self._shift = np.uint64(64 - self.bits)
        self._seen = np.zeros(1 << max(0, self.bits - 3), dtype=np.uint8)
        self._twice = np.zeros_like(self._seen)

    @classmethod
    def of(cls, chunks: Iterable[np.ndarray], distinct_keys: int) -> TwiceFilter:
        """A filter that has seen every key of ``chunks`` (about ``distinct_keys`` distinct ones:
        :func:`estimate_keys`)."""
        out = cls(slot_bits(distinct_keys))
        for chunk in chunks:
            out.add(chunk)
        out.done()
        return out

    def _slots(self, keys: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return ((np.asarray(keys, dtype=np.uint64) * _MUL) >> self._shift).astype(np.int64)

    def add(self, keys: np.ndarray) -> None:
        """Count ``keys`` (repeats within ``keys`` count too)."""
        if not keys.shape[0]:
            return
        slots = np.sort(self._slots(keys))
        starts = np.flatnonzero(np.concatenate(([True], slots[1:] != slots[:-1])))
        uniq = slots[starts]
        repeated = np.diff(np.append(starts, slots.shape[0])) > 1
        twice = uniq[repeated | _test(self._seen, uniq)]
        _set(self._twice, twice)
        _set(self._seen, uniq)

    def done(self) -> None:
        """No more keys: drop what only counting needed."""
        self._seen = np.zeros(0, dtype=np.uint8)

    def twice_slots(self) -> int:
        """Slots marked twice: about the distinct keys that occur at least twice (at most)."""
        return _popcount(self._twice)

    def maybe_twice(self, keys: np.ndarray) -> np.ndarray:
        """Per key: may it occur at least twice (True for every key that does)."""
        if not keys.shape[0]:
            return np.zeros(0, dtype=bool)
        return _test(self._twice, self._slots(keys))


def _test(bitset: np.ndarray, slots: np.ndarray) -> np.ndarray:
    return (bitset[slots >> 3] >> (slots & 7).astype(np.uint8)) & 1 == 1


def _set(bitset: np.ndarray, sorted_slots: np.ndarray) -> None:
    """Set the bits of ``sorted_slots`` (sorted, distinct): one OR per byte touched."""
    if not sorted_slots.shape[0]:
        return
    byte = sorted_slots >> 3
    bit = np.left_shift(np.uint8(1), (sorted_slots & 7).astype(np.uint8))
    starts = np.flatnonzero(np.concatenate(([True], byte[1:] != byte[:-1])))
    bitset[byte[starts]] |= np.bitwise_or.reduceat(bit, starts)


def _popcount(bitset: np.ndarray, step: int = 1 << 22) -> int:
    """Set bits of a large bitset, a slice at a time."""
    return sum(int(np.unpackbits(bitset[i : i + step]).sum(dtype=np.int64)) for i in range(0, bitset.shape[0], step))
