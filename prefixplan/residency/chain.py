"""Block keys of the token content KV events carry: prefixplan's own chained key.

Engine block hashes cannot be recomputed outside the engine (a random or ``PYTHONHASHSEED``
seed, a pickled tuple), so the index keys a resident block by the tokens its ``BlockStored``
event carries, with the key the trace uses (scheme ``pp-prefix-1`` of
:mod:`prefixplan.trace.blockhash`): the key of a block identifies the prompt's tokens up to
the block's last token, in the prompt's namespace (model, LoRA, cache salt). A block's event
carries only its own tokens and its parent's engine hash, so the chain is extended from the
parent's :class:`ChainState` (the un-finalised prefix sum, the tokens covered, the seed), and a
key computed here equals the one :meth:`~prefixplan.trace.blockhash.BlockHasher.block_keys`
gives the whole prompt (tests/test_residency_index.py checks that on split prompts).

Blocks whose extra keys hold anything other than the LoRA name and the first block's cache
salt (multimodal items, prompt-embedding digests) get their key perturbed by a hash of those
entries, and so do their descendants: token content alone does not identify them, and they never
match a key computed from token ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prefixplan.core.types import namespace_key
from prefixplan.trace.blockhash import BlockHasher, namespace_seed

_M64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class ChainState:
    """Where a chain stands after a block: its key, the prefix sum before finalisation
    (``P_i`` of the scheme, mod 2**64), the tokens it covers and the namespace seed."""

    key: int
    total: int
    tokens: int
    seed: int


def _opaque(entries: Sequence[Any]) -> int:
    """A 64-bit value standing for extra keys token ids do not capture."""
    return int.from_bytes(hashlib.blake2b(repr(list(entries)).encode(), digest_size=8).digest(), "little") | 1


class ChainKeyer:
    """Extends chains block by block and keys whole prompts, both in scheme ``pp-prefix-1``."""

    def __init__(self) -> None:
        self._hasher = BlockHasher()
        self._seeds: dict[str, int] = {}

    def seed(self, namespace: str) -> int:
        seed = self._seeds.get(namespace)
        if seed is None:
            seed = self._seeds[namespace] = namespace_seed(namespace)
        return seed

    def root(self, model: str | None, lora: str | None = None, salt: str | None = None) -> ChainState:
        """The empty chain of a namespace (no tokens yet)."""
        return ChainState(key=0, total=0, tokens=0, seed=self.seed(namespace_key(model, lora, salt)))

    def extend(
        self, parent: ChainState, tokens: np.ndarray, block_size: int, perturb: Sequence[int] | None = None
    ) -> list[ChainState]:
        """The states after each of the ``len(tokens) // block_size`` blocks of ``tokens`` that
        follow ``parent``; ``perturb[i]`` (0 for none) is folded into block ``i`` and what follows."""
        n = int(tokens.shape[0])
        nb = n // block_size
        if nb == 0:
            return []
        # the scheme's mixed tokens at the absolute positions of these tokens
        x = self._hasher.mixed(tokens, parent.tokens)
        with np.errstate(over="ignore"):
            sums = np.cumsum(x, dtype=np.uint64)[block_size - 1 : nb * block_size : block_size]
            sums += np.uint64(parent.total)
            if perturb is not None and any(perturb):
                sums += np.cumsum(np.asarray([d & _M64 for d in perturb[:nb]], dtype=np.uint64), dtype=np.uint64)
        keys = self._hasher.finalise(sums, parent.seed)
        base = parent.tokens
        return [
            ChainState(key=int(k), total=int(s), tokens=base + (i + 1) * block_size, seed=parent.seed)
            for i, (k, s) in enumerate(zip(keys.tolist(), sums.tolist(), strict=True))
        ]

    def prompt_keys(
        self,
        token_ids: Sequence[int] | np.ndarray,
        block_size: int,
        *,
        model: str | None,
        lora: str | None = None,
        cache_salt: str | None = None,
    ) -> list[int]:
        """Keys of the full blocks of a prompt: what a request would find resident, block by block
        (the trace's keys: ``BlockHasher.block_keys`` with the namespace's seed)."""
        seed = self.seed(namespace_key(model, lora, cache_salt))
        tokens = np.asarray(token_ids, dtype=np.uint32)
        return [int(k) for k in self._hasher.block_keys(tokens, seed, int(block_size)).tolist()]

    @staticmethod
    def split_extra(entries: Sequence[Any] | None, lora: str | None, first: bool) -> tuple[str | None, int]:
        """A block's published extra keys as (cache salt, perturbation): the LoRA name is dropped
        (the namespace has it), the first block's last string is its cache salt, and anything
        left makes the block opaque (a non-zero perturbation)."""
        rest = list(entries or ())
        if lora is not None and rest and rest[0] == lora:
            rest = rest[1:]
        salt = None
        if first:
            strings = [i for i, e in enumerate(rest) if isinstance(e, str)]
            if strings:
                salt = rest.pop(strings[-1])
        return salt, (_opaque(rest) if rest else 0)
