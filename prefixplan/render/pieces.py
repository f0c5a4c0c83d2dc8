"""Token ids of text pieces already encoded (system prompts, tool schemas, documents), reused by
the renderers that encode a request piece by piece."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np


class PieceCache:
    """LRU cache text piece -> (ids, char starts), bounded by total cached tokens."""

    def __init__(self, max_tokens: int = 8_000_000) -> None:
        self.max_tokens = max_tokens
        self._data: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._tokens = 0
        self.hits = 0
        self.misses = 0

    def get(self, piece: str) -> tuple[np.ndarray, np.ndarray] | None:
        item = self._data.get(piece)
        if item is not None:
            self._data.move_to_end(piece)
            self.hits += 1
        return item

    def put(self, piece: str, item: tuple[np.ndarray, np.ndarray]) -> None:
        self.misses += 1
        if piece in self._data:
            return
        self._data[piece] = item
        self._tokens += int(item[0].shape[0])
        while self._tokens > self.max_tokens and len(self._data) > 1:
            _, (ids, _) = self._data.popitem(last=False)
            self._tokens -= int(ids.shape[0])
