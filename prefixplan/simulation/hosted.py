"""Anthropic prompt caching: prefixes cached up to ``cache_control`` breakpoints.

Model (documented simplification of the provider's behaviour):

* A request's breakpoints are its ``cache_control`` token offsets (prefix lengths); a
  request without any (or ``breakpoints="auto"``) gets one breakpoint at the prompt end.
* Lookup: the longest cache entry that is a prefix of the request, ends at or before its
  last breakpoint, is at least the model minimum, and was used within the TTL. Entries are
  looked up where the request has a boundary (the end of its system text, of each tool, of
  each message, of the prompt): an entry ending inside one of its segments is not found. The
  provider's 20-block lookback limit is not modelled.
* Writes: every breakpoint at or above the minimum and beyond the hit creates an entry;
  the tokens between the hit and the furthest such breakpoint are billed as cache writes.
  Reads and writes refresh an entry's TTL.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from prefixplan.trace.requests import SimRequest


class AnthropicCache:
    """Observer for :class:`~prefixplan.trace.blocks.TraceBuilder` (one call per request)."""

    def __init__(self, min_tokens: int, ttl_s: float | None, mode: str = "request") -> None:
        self.min_tokens = int(min_tokens)
        self.ttl = ttl_s
        self.mode = mode
        self.entries: dict[int, float] = {}  # prefix key -> last use (seconds)
        self.lengths: dict[str, list[int]] = {}  # namespace -> sorted entry lengths
        self.read: list[int] = []
        self.write: list[int] = []

    def _alive(self, key: int, now: float) -> bool:
        t = self.entries.get(key)
        return t is not None and (self.ttl is None or now - t <= self.ttl)

    def __call__(self, req: SimRequest, keys: Mapping[int, int]) -> None:
        n = req.n_units
        scale = max(1, int(req.block_scale))
        now = float(req.time)
        bps = sorted({int(b) for b in req.breakpoints if 0 < int(b) <= n}) if self.mode == "request" else []
        if not bps:
            bps = [n] if n else []
        lengths = self.lengths.setdefault(req.namespace, [])
        hit = 0
        if bps:
            limit = bps[-1]
            i = bisect.bisect_right(lengths, limit)
            while i > 0:
                i -= 1
                length = lengths[i]
                if length * scale < self.min_tokens:  # lengths count units (a trace's unit: scale tokens)
                    break
                key = keys.get(length)
                if key is not None and self._alive(key, now):
                    hit = length
                    self.entries[key] = now
                    break
        written = hit
        for bp in bps:
            if bp * scale < self.min_tokens or bp not in keys:
                continue
            key = keys[bp]
            if bp > hit:
                written = max(written, bp)
            i = bisect.bisect_left(lengths, bp)
            if i == len(lengths) or lengths[i] != bp:
                lengths.insert(i, bp)
            self.entries[key] = now
        self.read.append(hit * scale)
        self.write.append((written - hit) * scale)
