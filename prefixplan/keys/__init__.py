"""Keys: the ``name@vN`` grammar, content and token hashes, recipes, the lock file and lineage names."""

from prefixplan.keys.hashing import (
    CONTENT_PREFIX,
    NAME_RE,
    SCHEME,
    TOKEN_PREFIX,
    CacheKey,
    content_hash,
    is_content_hash,
    parse_key,
    part_hash,
    token_hash,
    token_ids_from_bytes,
    token_ids_to_bytes,
)

__all__ = [
    "CONTENT_PREFIX",
    "NAME_RE",
    "SCHEME",
    "TOKEN_PREFIX",
    "CacheKey",
    "content_hash",
    "is_content_hash",
    "parse_key",
    "part_hash",
    "token_hash",
    "token_ids_from_bytes",
    "token_ids_to_bytes",
]
