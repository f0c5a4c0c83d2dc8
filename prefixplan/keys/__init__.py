"""Keys: the ``name@vN`` grammar, content and token hashes, recipes, the lock file and lineage names.

The hash encodings live in :mod:`prefixplan.core.hashes` (every stage may compute them); this
package re-exports them with the grammar so ``from prefixplan.keys import content_hash,
parse_key`` is the one way callers reach the key contract.
"""

from prefixplan.core.hashes import (
    CONTENT_PREFIX,
    KEY_SCHEME,
    TOKEN_PREFIX,
    ContentHash,
    TokenHash,
    content_hash,
    is_content_hash,
    part_hash,
    token_hash,
    token_ids_from_bytes,
    token_ids_to_bytes,
)
from prefixplan.keys.grammar import (
    DEFAULT_RETAIN_SECONDS,
    MAX_VERSION,
    NAME_RE,
    CacheKey,
    parse_key,
    parse_key_ref,
)

__all__ = [
    "CONTENT_PREFIX",
    "DEFAULT_RETAIN_SECONDS",
    "KEY_SCHEME",
    "MAX_VERSION",
    "NAME_RE",
    "TOKEN_PREFIX",
    "CacheKey",
    "ContentHash",
    "TokenHash",
    "content_hash",
    "is_content_hash",
    "parse_key",
    "parse_key_ref",
    "part_hash",
    "token_hash",
    "token_ids_from_bytes",
    "token_ids_to_bytes",
]
