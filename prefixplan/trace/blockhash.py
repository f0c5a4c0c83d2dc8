"""Block keys: 64-bit identities of token prefixes, the way engines key KV blocks.

Scheme ``pp-prefix-1`` (stable across versions and machines; traces store these keys):

* each token ``t_i`` at position ``i`` is mixed with a position constant
  ``K_i = splitmix64(i) | 1``: ``x_i = m(K_i * (t_i + 1))`` where ``m(z) = z ^ (z >> 31)``,
  then ``* 0xBF58476D1CE4E5B9``, then ``^ (z >> 29)`` (all mod 2**64);
* the prefix sum ``P_i = x_0 + ... + x_i`` (mod 2**64) plus the namespace seed ``S`` is
  finalised: ``key_i = f(P_i + S) | 1`` with ``f(z) = z ^ (z >> 33)``, ``* 0x94D049BB133111EB``,
  ``^ (z >> 33)``;
* ``S`` is the first 8 bytes (little-endian) of
  ``blake2b(namespace + b"\\0" + scale + b"\\0" + salt, digest_size=8)`` (``scale`` in decimal).

``key_i`` identifies ``tokens[:i+1]`` in its namespace: the key of a block covers its parent's
prefix and its own tokens (chained, as vLLM's block hashes), and a whole prompt's keys cost one
vectorised pass. Keys are odd, so 0 never occurs (it marks empty slots in
:class:`~prefixplan.trace.storage.u64index.U64Index`). Two distinct prefixes share a key with
probability about ``D**2 / 2**64`` for ``D`` distinct prefixes.

A salt (``trace --export``) gives every key a different value per export, so exported hash ids
cannot be matched against keys computed from known prompts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

BLOCK_SCHEME = "pp-prefix-1"

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_SM1 = np.uint64(0xBF58476D1CE4E5B9)
_SM2 = np.uint64(0x94D049BB133111EB)
_S27 = np.uint64(27)
_S29 = np.uint64(29)
_S30 = np.uint64(30)
_S31 = np.uint64(31)
_S33 = np.uint64(33)
_ONE = np.uint64(1)


def _splitmix64(i: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = (i.astype(np.uint64) + _ONE) * _GOLDEN
        z = (z ^ (z >> _S30)) * _SM1
        z = (z ^ (z >> _S27)) * _SM2
        return z ^ (z >> _S31)


class BlockHasher:
    """Prefix keys of token arrays (module docstring); position constants are cached."""

    def __init__(self) -> None:
        self._k = np.zeros(0, dtype=np.uint64)

    def _consts(self, n: int) -> np.ndarray:
        if self._k.shape[0] < n:
            size = max(n, 2 * self._k.shape[0], 4096)
            self._k = _splitmix64(np.arange(size, dtype=np.uint64)) | _ONE
        return self._k[:n]

    def mixed(self, tokens: np.ndarray, start: int = 0) -> np.ndarray:
        """``x_i`` of the scheme for ``tokens`` at positions ``start``, ``start + 1``, ... (a chain
        continued from a prefix of ``start`` tokens adds their prefix sums to its own). Array
        arithmetic wraps modulo 2**64 without a warning; the steps work in place."""
        n = int(tokens.shape[0])
        x = tokens.astype(np.uint64)
        x += _ONE
        x *= self._consts(start + n)[start:]
        shifted = x >> _S31
        x ^= shifted
        x *= _SM1
        np.right_shift(x, _S29, out=shifted)
        x ^= shifted
        return x

    @staticmethod
    def finalise(sums: np.ndarray, seed: int) -> np.ndarray:
        """Keys of prefixes whose prefix sums ``P_i`` are ``sums`` (``f(P_i + S) | 1``)."""
        p = sums.astype(np.uint64)
        p += np.uint64(seed)
        shifted = p >> _S33
        p ^= shifted
        p *= _SM2
        np.right_shift(p, _S33, out=shifted)
        p ^= shifted
        p |= _ONE
        return p

    def prefix_sums(self, tokens: np.ndarray) -> np.ndarray:
        """``P_i`` of ``tokens[:i+1]`` at index ``i``; :meth:`finalise` of the ones a caller
        needs gives their keys (the mixing is elementwise: finalising a few equals taking those
        few of every key)."""
        return np.cumsum(self.mixed(tokens), dtype=np.uint64)

    def prefix_keys(self, tokens: np.ndarray, seed: int) -> np.ndarray:
        """Key of ``tokens[:i+1]`` at index ``i`` (uint64 array, same length)."""
        return self.finalise(self.prefix_sums(tokens), seed)

    def block_keys(self, tokens: np.ndarray, seed: int, units_per_block: int) -> np.ndarray:
        """Keys of the full blocks of ``tokens`` (``units_per_block`` entries each)."""
        sums = self.prefix_sums(np.asarray(tokens, dtype=np.uint32))
        return self.keys_of_sums(sums, seed, units_per_block)[0]

    def keys_of_sums(
        self, sums: np.ndarray, seed: int, units_per_block: int, lengths: Sequence[int] = ()
    ) -> tuple[np.ndarray, np.ndarray]:
        """From the tokens' :meth:`prefix_sums`: the keys of the full blocks, and the keys of the
        prefixes of ``lengths`` tokens (each at least 1); only those places are finalised, in
        one call."""
        nb = sums.shape[0] // units_per_block
        ends = sums[units_per_block - 1 : nb * units_per_block : units_per_block]
        at = sums[np.asarray(lengths, dtype=np.int64) - 1]
        keys = self.finalise(np.concatenate((ends, at)), seed)
        return keys[:nb], keys[nb:]


class SharedPrefixSums:
    """:meth:`BlockHasher.prefix_sums` that reuses the sums of a recent token array beginning with
    the same tokens: prompts of one application share their system prompt and tools, and a
    conversation its earlier turns, so most of a prompt's sums are an earlier prompt's (``P_i``
    depends only on the tokens up to ``i``). Only the tokens after the common prefix are mixed
    and summed.

    The recent arrays are found by their first :attr:`head` tokens, the latest one per head, at
    most ``entries`` of them (the least recently used goes); shorter arrays are summed whole. The
    sums returned are remembered as they are: callers read them and do not change them.
    """

    head = 16

    def __init__(self, hasher: BlockHasher, entries: int = 64) -> None:
        if entries < 1:
            raise ValueError(f"entries must be >= 1, got {entries}")
        self.hasher = hasher
        self.entries = int(entries)
        self._recent: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        self.reused_tokens = 0
        """Tokens whose sums came from an earlier array."""

    def __call__(self, tokens: np.ndarray) -> np.ndarray:
        """``P_i`` of ``tokens[:i+1]`` at index ``i`` (uint32 tokens)."""
        n = int(tokens.shape[0])
        if n < self.head:
            return self.hasher.prefix_sums(tokens)
        key = tokens[: self.head].tobytes()
        recent = self._recent.pop(key, None)
        if recent is None:
            sums = self.hasher.prefix_sums(tokens)
            if len(self._recent) >= self.entries:
                del self._recent[next(iter(self._recent))]
        else:
            before, before_sums = recent
            m = min(n, int(before.shape[0]))
            differ = tokens[:m] != before[:m]
            first = int(differ.argmax())
            shared = first if differ[first] else m
            sums = np.empty(n, dtype=np.uint64)
            sums[:shared] = before_sums[:shared]
            if shared < n:
                tail = sums[shared:]
                np.cumsum(self.hasher.mixed(tokens[shared:], shared), out=tail)
                if shared:
                    tail += before_sums[shared - 1]
            self.reused_tokens += shared
        self._recent[key] = (tokens.copy(), sums)
        return sums


def namespace_seed(namespace: str, scale: int = 1, salt: bytes = b"") -> int:
    """The seed ``S`` of a namespace (module docstring); ``scale`` is the real tokens per entry
    (Mooncake hash ids stand for whole blocks)."""
    digest = hashlib.blake2b(
        namespace.encode("utf-8") + b"\x00" + str(int(scale)).encode() + b"\x00" + salt, digest_size=8
    ).digest()
    return int.from_bytes(digest, "little")


def salted(keys: np.ndarray, salt: bytes) -> np.ndarray:
    """``keys`` re-keyed by ``salt`` (an export's secret): a bijection per salt, so equal keys
    stay equal and distinct keys stay distinct, but the values say nothing without the salt."""
    if not salt:
        return keys
    s = np.uint64(int.from_bytes(hashlib.blake2b(b"pp-salt\x00" + salt, digest_size=8).digest(), "little"))
    with np.errstate(over="ignore"):
        z = keys.astype(np.uint64) ^ s
        z ^= z >> _S33
        z *= _SM1
        z ^= z >> _S29
        z *= _SM2
        z ^= z >> _S31
    return z
