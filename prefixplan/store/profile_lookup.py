"""Prefill profiles by name: a built-in, a YAML file, or one ``prefixplan calibrate`` stored."""

from __future__ import annotations

import os
from typing import Any

from prefixplan.savings.prefill import PrefillProfile, load_profile
from prefixplan.store.db import open_store, resolve_db_path


def find_profile(name: str, path: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The stored prefill profile ``name`` from the store at ``path`` (default as :func:`open_store`),
    or None; an absent store file is not created."""
    if not resolve_db_path(path).is_file():
        return None
    with open_store(path) as store:
        return store.get_profile(name)


def stored_profile(name: str, path: str | os.PathLike[str] | None = None) -> PrefillProfile | None:
    """The profile ``calibrate`` stored as ``name`` as a :class:`PrefillProfile`, or None."""
    row = find_profile(name, path)
    if row is None:
        return None
    return PrefillProfile(
        name=name,
        a=float(row["a_s"]),
        b=float(row["b_s_per_token"]),
        c=float(row["c_s_per_token2"]),
        model=str(row.get("model") or ""),
        source=f"measured {row.get('created') or ''} by calibrate ({row.get('endpoint')})",
    )


def resolve_profile(spec: str | None, db: str | os.PathLike[str] | None = None) -> PrefillProfile:
    """``--profile SPEC`` for every command: a built-in name, a YAML file, or a stored name
    (:func:`prefixplan.savings.prefill.load_profile` with the store as the lookup)."""
    return load_profile(spec, stored=lambda name: stored_profile(name, db))
