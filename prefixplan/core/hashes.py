"""The kinds of hash prefixplan uses, as distinct types, and the analysis-internal one.

=================  ===========================================  ==========================
type               what it identifies                           made by
=================  ===========================================  ==========================
``SegmentHash``    a segment's or chunk's text inside one       :func:`segment_hash`
                   analysis (16 hex chars of sha256)
``ContentHash``    a key's exact part bytes (``pp1:sha256:``)    :func:`content_hash`
``TokenHash``      a tokenizer fingerprint + token ids           :func:`token_hash`
                   (``pp1:tok:sha256:``)
=================  ===========================================  ==========================

Only ``ContentHash`` and ``TokenHash`` are contracts (stored, locked, documented in
docs/keys.md); ``SegmentHash`` may change between versions of prefixplan.

The key contract (pp1)
----------------------

The encodings below are a *contract* (documented in ``docs/keys.md`` and pinned by golden
tests in ``tests/test_keys.py``). Changing any byte of them requires a new scheme tag
(``pp2:``), never a silent change, because committed lock files and stored versions refer
to these exact values.

``content_hash`` (scheme ``pp1``)
    SHA-256 over::

        b"prefixplan-content\\x00pp1\\x00"
        u64be(number of parts)
        for each (kind, data) in order:
            u32be(len(kind_utf8)) kind_utf8
            u64be(len(data))      data

    rendered as ``"pp1:sha256:" + hexdigest``. Parts are hashed exactly as given: no
    normalisation of whitespace, JSON key order or line endings, because any such change
    is a real change for an engine's prefix cache.

``token_hash`` (scheme ``pp1``)
    SHA-256 over::

        b"prefixplan-tokens\\x00pp1\\x00"
        u32be(len(fingerprint_utf8)) fingerprint_utf8
        u64be(number of tokens)
        each token id as u32le

    rendered as ``"pp1:tok:sha256:" + hexdigest``.

``part_hash``
    plain ``"sha256:" + hexdigest`` of one part's bytes; used in the lock file so that
    ``check`` can say which part changed. It is informative; the key's identity is the
    ``content_hash``.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterable, Sequence
from typing import NewType

SegmentHash = NewType("SegmentHash", str)
ContentHash = NewType("ContentHash", str)
TokenHash = NewType("TokenHash", str)


def segment_hash(text: str | bytes) -> SegmentHash:
    """Identity of a segment or chunk text inside one analysis: 16 hex chars of sha256 over
    the UTF-8 bytes. Not a key contract (see the module table)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return SegmentHash(hashlib.sha256(data).hexdigest()[:16])


KEY_SCHEME = "pp1"
"""The scheme of key content and token hashes (the lock's ``scheme:``)."""
CONTENT_PREFIX = "pp1:sha256:"
TOKEN_PREFIX = "pp1:tok:sha256:"
_CONTENT_DOMAIN = b"prefixplan-content\x00pp1\x00"
_TOKEN_DOMAIN = b"prefixplan-tokens\x00pp1\x00"


def content_hash(parts: Sequence[tuple[str, bytes]]) -> ContentHash:
    """Hash an ordered sequence of ``(kind, exact bytes)`` parts (scheme ``pp1``).

    Args:
        parts: the prefix's parts in order, e.g. ``[("system", b"..."), ("tool", b"{...}")]``.

    Returns:
        ``"pp1:sha256:<64 hex>"``.
    """
    h = hashlib.sha256(_CONTENT_DOMAIN)
    h.update(struct.pack(">Q", len(parts)))
    for kind, data in parts:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"part {kind!r}: data must be bytes, not {type(data).__name__}")
        if isinstance(data, memoryview):
            data = data.cast("B")  # its length in bytes, whatever the item size
        k = kind.encode("utf-8")
        h.update(struct.pack(">I", len(k)))
        h.update(k)
        h.update(struct.pack(">Q", len(data)))
        h.update(data)
    return ContentHash(CONTENT_PREFIX + h.hexdigest())


def token_hash(fingerprint: str, token_ids: Iterable[int]) -> TokenHash:
    """Hash a tokenizer fingerprint and a token-id sequence (scheme ``pp1``).

    Args:
        fingerprint: the tokenizer fingerprint (vocab + template + kwargs), any string.
        token_ids: token ids (a ``numpy`` uint32 array or any iterable of ints < 2**32).

    Returns:
        ``"pp1:tok:sha256:<64 hex>"``.
    """
    ids = token_ids_to_bytes(token_ids)
    fp = fingerprint.encode("utf-8")
    h = hashlib.sha256(_TOKEN_DOMAIN)
    h.update(struct.pack(">I", len(fp)))
    h.update(fp)
    h.update(struct.pack(">Q", len(ids) // 4))
    h.update(ids)
    return TokenHash(TOKEN_PREFIX + h.hexdigest())


def part_hash(data: bytes) -> str:
    """``"sha256:<hex>"`` of one part's exact bytes (lock file detail)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def token_ids_to_bytes(token_ids: Iterable[int]) -> bytes:
    """Token ids as little-endian uint32 bytes (the store's BLOB layout)."""
    import numpy as np

    if isinstance(token_ids, (bytes, bytearray, str)):
        raise TypeError("token_ids must be integers")
    arr = np.asarray(token_ids if isinstance(token_ids, np.ndarray) else list(token_ids))
    if arr.size == 0:
        return b""
    if arr.dtype.kind not in "iu":
        raise TypeError("token ids must be integers")
    if int(arr.min()) < 0 or int(arr.max()) > 0xFFFFFFFF:
        raise ValueError("token ids must fit in uint32")
    return np.ascontiguousarray(arr.reshape(-1), dtype="<u4").tobytes()


def token_ids_from_bytes(blob: bytes) -> list[int]:
    """Inverse of :func:`token_ids_to_bytes`."""
    if len(blob) % 4:
        raise ValueError("token id blob length is not a multiple of 4")
    return list(struct.unpack(f"<{len(blob) // 4}I", blob))


def is_content_hash(value: str) -> bool:
    """True when ``value`` looks like a ``pp1`` content hash."""
    return bool(re.fullmatch(r"pp1:sha256:[0-9a-f]{64}", value))
