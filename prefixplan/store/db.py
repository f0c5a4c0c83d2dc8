"""The SQLite registry of prefixes, versions, analyses and warm runs.

Opened with :func:`open_store`; the path comes from the explicit argument, else the
``PREFIXPLAN_DB`` environment variable, else ``./prefixplan.db``. The schema is created and
upgraded by ``sqlite_utils.Migrations`` (set ``prefixplan``), so the file stays readable with
the plain ``sqlite-utils`` and ``sqlite3`` command-line tools.

Safety: the database runs in WAL mode with a busy timeout, and every write method is one
``BEGIN IMMEDIATE`` transaction, so concurrent writers (several CI jobs or analyses) are
serialised by SQLite and a process killed mid-write leaves either the whole write or none
of it. ``UNIQUE(name, version)`` makes a duplicate version impossible.

Timestamps are UTC ISO-8601 strings (``2025-03-01T12:00:00Z``), which sort as text.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from prefixplan.errors import StoreError
from prefixplan.store.analyses import AnalysesMixin
from prefixplan.store.base import StoreBase
from prefixplan.store.gateway_tables import GatewayMixin
from prefixplan.store.profiles import ProfilesMixin
from prefixplan.store.schema import migrations
from prefixplan.store.versions import VersionsMixin
from prefixplan.store.warm_runs import WarmRunsMixin

DEFAULT_DB = "prefixplan.db"
ENV_DB = "PREFIXPLAN_DB"
BUSY_TIMEOUT_S = 60.0


def resolve_db_path(path: str | os.PathLike[str] | None = None) -> Path:
    """Store path: explicit ``path`` > ``$PREFIXPLAN_DB`` > ``./prefixplan.db``."""
    if path is not None and str(path) != "":
        return Path(path)
    env = os.environ.get(ENV_DB)
    if env:
        return Path(env)
    return Path(DEFAULT_DB)


class Store(VersionsMixin, AnalysesMixin, WarmRunsMixin, ProfilesMixin, GatewayMixin, StoreBase):
    """The prefixplan registry. Create with :func:`open_store`; close with :meth:`close`.

    Each table family's methods live in its own module (versions, analyses, warm runs,
    profiles); this class only composes them.
    """

    def migrate(self) -> None:
        """Apply pending schema migrations (serialised across processes)."""
        steps = migrations()
        if not steps.pending(self.db):
            return
        with self.write():
            steps.apply(self.db)  # nested: runs in savepoints of our transaction


def open_store(path: str | os.PathLike[str] | None = None, *, migrate: bool = True, create: bool = True) -> Store:
    """Open (creating and migrating) the store at ``path`` / ``$PREFIXPLAN_DB`` / ``./prefixplan.db``.

    ``create=False`` is for commands that only read or tidy a store: a mistyped ``--db`` is then
    an error naming the path, not a new empty store (and folder) reported as having no rows.

    Raises:
        StoreError: the file cannot be opened, put in WAL mode or migrated, or (``create=False``)
            does not exist.
    """
    db_path = resolve_db_path(path)
    created = not db_path.exists()
    if created and not create:
        raise StoreError(
            f"no store at {db_path}",
            hint="the store is made by analyze, lock, warm or the gateway; check --db / PREFIXPLAN_DB",
        )
    try:
        if db_path.parent and not db_path.parent.exists():
            db_path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(db_path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"{db_path}: cannot enable WAL mode (journal_mode={mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(f"cannot open store {db_path}: {exc}", hint="check --db / PREFIXPLAN_DB") from exc
    store = Store(db_path, conn)
    store.created = created
    try:
        store.migrate()
    except (sqlite3.Error, StoreError) as exc:
        store.close()
        if isinstance(exc, StoreError):
            raise
        raise StoreError(f"cannot migrate store {db_path}: {exc}") from exc
    return store
