"""The store's connection and its one write transaction; table families extend :class:`StoreBase`."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from prefixplan.errors import StoreError

STATUSES = ("active", "superseded", "expired")
_S = TypeVar("_S", bound="StoreBase")


def iso(ts: float) -> str:
    """UTC ISO-8601 text for epoch seconds (second resolution, sortable)."""
    return datetime.fromtimestamp(int(ts), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_iso(now: float | None = None) -> str:
    """:func:`iso` of ``now`` (default: the current time)."""
    return iso(time.time() if now is None else now)


class StoreBase:
    """A connection in autocommit mode whose writes go through :meth:`write`."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        from sqlite_utils import Database

        self.path = path
        self.conn = conn
        self.created = False  # this open created the file
        self.db: Any = Database(conn)
        self._depth = 0  # nesting of write(): inner writes are savepoints of the outer transaction

    def close(self) -> None:
        self.conn.close()

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on error.

        Nested inside another :meth:`write` it is a savepoint: its error undoes its own changes,
        and nothing is committed until the outermost write ends, so several writes (``lock``
        registering every recipe) can be one transaction."""
        if self._depth:
            yield from self._savepoint()
            return
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"{self.path}: cannot start a write: {exc}") from exc
        self._depth = 1
        try:
            yield self.conn
        except BaseException as exc:
            self._depth = 0
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"{self.path}: write failed: {exc}") from exc
            raise
        else:
            self._depth = 0
            try:
                self.conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise StoreError(f"{self.path}: commit failed: {exc}") from exc

    def _savepoint(self) -> Iterator[sqlite3.Connection]:
        name = f"pp_{self._depth}"
        self.conn.execute(f"SAVEPOINT {name}")
        self._depth += 1
        try:
            yield self.conn
        except BaseException:
            self.conn.execute(f"ROLLBACK TO {name}")
            self.conn.execute(f"RELEASE {name}")
            raise
        else:
            self.conn.execute(f"RELEASE {name}")
        finally:
            self._depth -= 1

    def integrity_check(self) -> str:
        """Result of ``PRAGMA integrity_check`` (``"ok"`` when healthy)."""
        return str(self.conn.execute("PRAGMA integrity_check").fetchone()[0])
