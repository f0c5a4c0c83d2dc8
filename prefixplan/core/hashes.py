"""The kinds of hash prefixplan uses, as distinct types, and the analysis-internal one.

=================  ===========================================  ==========================
type               what it identifies                           made by
=================  ===========================================  ==========================
``SegmentHash``    a segment's or chunk's text inside one       :func:`segment_hash`
                   analysis (16 hex chars of sha256)
``ContentHash``    a key's exact part bytes (``pp1:sha256:``)    :func:`prefixplan.keys.content_hash`
``TokenHash``      a tokenizer fingerprint + token ids           :func:`prefixplan.keys.token_hash`
                   (``pp1:tok:sha256:``)
``BlockHash``      one cache block chained over its parent       the trace (engine-style block keys)
=================  ===========================================  ==========================

Only ``ContentHash`` and ``TokenHash`` are contracts (stored, locked, documented in
docs/keys.md); ``SegmentHash`` may change between versions of prefixplan.
"""

from __future__ import annotations

import hashlib
from typing import NewType

SegmentHash = NewType("SegmentHash", str)
ContentHash = NewType("ContentHash", str)
TokenHash = NewType("TokenHash", str)
BlockHash = NewType("BlockHash", int)


def segment_hash(text: str | bytes) -> SegmentHash:
    """Identity of a segment or chunk text inside one analysis: 16 hex chars of sha256 over
    the UTF-8 bytes. Not a key contract (see the module table)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return SegmentHash(hashlib.sha256(data).hexdigest()[:16])
