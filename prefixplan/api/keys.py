"""``prefixplan keys list|show|history|expire|gc``: the versioned keys in the store, one request
and one call per subcommand. None of them creates a store: a mistyped ``db`` is an error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefixplan.store import Store, VersionRecord


@dataclass(frozen=True)
class KeysListRequest:
    """``keys list``: every version, or those of one ``status`` (active, superseded, expired)."""

    status: str | None = None
    db: str | None = None


@dataclass(frozen=True)
class KeysShowRequest:
    """``keys show``: one version, ``name@vN`` (or a name: its active version)."""

    key: str
    db: str | None = None


@dataclass(frozen=True)
class KeysHistoryRequest:
    """``keys history``: every version of one name."""

    name: str
    db: str | None = None


@dataclass(frozen=True)
class KeysExpireRequest:
    """``keys expire``: superseded versions past their retention become expired, at ``now``
    (epoch seconds; None: the current time)."""

    now: float | None = None
    db: str | None = None


@dataclass(frozen=True)
class KeysGcRequest:
    """``keys gc``: the expired versions, deleted when ``delete`` (else a dry run)."""

    delete: bool = False
    db: str | None = None


def _open(db: str | None) -> Store:
    from prefixplan.store import open_store

    return open_store(db, create=False)


def run_keys_list(request: KeysListRequest) -> list[VersionRecord]:
    """All versions (of ``request.status``), by name then version."""
    with _open(request.db) as store:
        return store.list_keys(request.status)


def run_keys_show(request: KeysShowRequest) -> VersionRecord:
    """The version ``request.key`` names.

    Raises:
        UsageError: a malformed key, or none such in the store.
    """
    from prefixplan.errors import UsageError
    from prefixplan.keys import parse_key_ref

    name, version = parse_key_ref(request.key)
    with _open(request.db) as store:
        rec = store.get(name, version)
    if rec is None:
        raise UsageError(f"no such key {request.key!r} in the store", hint="see `prefixplan keys list`")
    return rec


def run_keys_history(request: KeysHistoryRequest) -> list[VersionRecord]:
    """All versions of ``request.name``, oldest first.

    Raises:
        UsageError: a malformed name (store or not), or no versions of it.
    """
    from prefixplan.errors import UsageError
    from prefixplan.keys import parse_key_ref

    key_name = parse_key_ref(request.name)[0]  # a malformed name is a usage error, store or not
    with _open(request.db) as store:
        records = store.versions(key_name)
    if not records:
        raise UsageError(f"no versions of {request.name!r} in the store", hint="see `prefixplan keys list`")
    return records


def run_keys_expire(request: KeysExpireRequest) -> list[VersionRecord]:
    """Mark superseded versions past their retention as expired; return them."""
    import time

    with _open(request.db) as store:
        return store.expire(request.now if request.now is not None else time.time())


def run_keys_gc(request: KeysGcRequest) -> list[VersionRecord]:
    """The expired versions, deleted when ``request.delete``; return them."""
    with _open(request.db) as store:
        return store.gc(dry_run=not request.delete)
