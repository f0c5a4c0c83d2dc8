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

import contextlib
import dataclasses
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prefixplan.errors import KeyConflictError, StoreError, UsageError
from prefixplan.keys import DEFAULT_RETAIN_SECONDS, NAME_RE, CacheKey, token_ids_to_bytes

DEFAULT_DB = "prefixplan.db"
ENV_DB = "PREFIXPLAN_DB"
BUSY_TIMEOUT_S = 60.0
STATUSES = ("active", "superseded", "expired")


def resolve_db_path(path: str | os.PathLike[str] | None = None) -> Path:
    """Store path: explicit ``path`` > ``$PREFIXPLAN_DB`` > ``./prefixplan.db``."""
    if path is not None and str(path) != "":
        return Path(path)
    env = os.environ.get(ENV_DB)
    if env:
        return Path(env)
    return Path(DEFAULT_DB)


def iso(ts: float) -> str:
    """UTC ISO-8601 text for epoch seconds (second resolution, sortable)."""
    return datetime.fromtimestamp(int(ts), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> float:
    """Epoch seconds for a timestamp written by :func:`iso`."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


@dataclass(frozen=True, slots=True)
class VersionRecord:
    """One row of ``versions``: a ``name@vN`` with its hashes and lifecycle."""

    name: str
    version: int
    content_hash: str
    status: str
    created: str
    kind: str | None = None
    token_hash: str | None = None
    token_count: int | None = None
    tokenizer_fingerprint: str | None = None
    namespace: str | None = None
    superseded_at: str | None = None
    retain_until: str | None = None
    retain_seconds: int = DEFAULT_RETAIN_SECONDS
    pinned: bool = False
    source: str | None = None
    has_token_ids: bool = False
    lineage: dict[str, Any] | None = None

    @property
    def key(self) -> CacheKey:
        return CacheKey(self.name, self.version)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (``key`` included)."""
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["key"] = str(self.key)
        return d


@dataclass(frozen=True, slots=True)
class LineageRow:
    """What the lineage rule needs to know of an existing prefix (latest version)."""

    name: str
    kind: str
    version: int
    system_head: str | None = None
    tool_names: tuple[str, ...] = ()


_VERSION_COLS = (
    "name, version, content_hash, status, created, kind, token_hash, token_count, "
    "tokenizer_fingerprint, namespace, superseded_at, retain_until, retain_seconds, pinned, "
    "source, token_ids IS NOT NULL AS has_token_ids, lineage"
)


def _row_to_record(row: sqlite3.Row | tuple[Any, ...]) -> VersionRecord:
    (
        name,
        version,
        chash,
        status,
        created,
        kind,
        thash,
        tcount,
        fp,
        ns,
        sup,
        until,
        rsec,
        pinned,
        source,
        has_ids,
        lineage,
    ) = row
    return VersionRecord(
        name=name,
        version=int(version),
        content_hash=chash,
        status=status,
        created=created,
        kind=kind,
        token_hash=thash,
        token_count=tcount,
        tokenizer_fingerprint=fp,
        namespace=ns,
        superseded_at=sup,
        retain_until=until,
        retain_seconds=int(rsec),
        pinned=bool(pinned),
        source=source,
        has_token_ids=bool(has_ids),
        lineage=json.loads(lineage) if lineage else None,
    )


def _migrations() -> Any:
    from sqlite_utils import Migrations

    migrations = Migrations("prefixplan")

    @migrations(name="001_initial")
    def _initial(db: Any) -> None:
        db.execute(
            """CREATE TABLE prefixes (
                name TEXT PRIMARY KEY,
                kind TEXT,
                source TEXT,
                created TEXT NOT NULL,
                last_version INTEGER NOT NULL DEFAULT 0
            )"""
        )
        db.execute(
            """CREATE TABLE versions (
                id INTEGER PRIMARY KEY,
                name TEXT NOT NULL REFERENCES prefixes(name),
                version INTEGER NOT NULL CHECK (version >= 1),
                content_hash TEXT NOT NULL,
                token_hash TEXT,
                token_count INTEGER,
                token_ids BLOB,
                tokenizer_fingerprint TEXT,
                namespace TEXT,
                kind TEXT,
                created TEXT NOT NULL,
                superseded_at TEXT,
                retain_until TEXT,
                status TEXT NOT NULL CHECK (status IN ('active', 'superseded', 'expired')),
                retain_seconds INTEGER NOT NULL,
                pinned INTEGER NOT NULL DEFAULT 0,
                source TEXT,
                lineage TEXT,
                UNIQUE (name, version)
            )"""
        )
        db.execute("CREATE INDEX versions_status ON versions(status, retain_until)")
        db.execute(
            """CREATE TABLE collected (
                name TEXT NOT NULL,
                version INTEGER NOT NULL,
                content_hash TEXT NOT NULL,
                collected TEXT NOT NULL,
                PRIMARY KEY (name, version)
            )"""
        )
        db.execute(
            """CREATE TABLE analyses (
                id INTEGER PRIMARY KEY,
                created TEXT NOT NULL,
                log_paths TEXT NOT NULL,
                summary TEXT NOT NULL,
                record_path TEXT
            )"""
        )
        db.execute(
            """CREATE TABLE analysis_candidates (
                analysis_id INTEGER NOT NULL REFERENCES analyses(id) ON DELETE CASCADE,
                rank INTEGER NOT NULL,
                key TEXT,
                kind TEXT,
                token_count INTEGER,
                content_hash TEXT,
                data TEXT NOT NULL,
                PRIMARY KEY (analysis_id, rank)
            )"""
        )
        db.execute(
            """CREATE TABLE warm_runs (
                id INTEGER PRIMARY KEY,
                created TEXT NOT NULL,
                endpoint TEXT,
                key TEXT,
                version INTEGER,
                tokens INTEGER,
                cold_ttft REAL,
                warm_ttft REAL,
                cached_tokens INTEGER,
                status TEXT,
                error TEXT,
                data TEXT
            )"""
        )

    @migrations(name="002_profiles")
    def _profiles(db: Any) -> None:
        db.execute(
            """CREATE TABLE profiles (
                name TEXT PRIMARY KEY,
                created TEXT NOT NULL,
                endpoint TEXT,
                model TEXT,
                a_s REAL NOT NULL,
                b_s_per_token REAL NOT NULL,
                c_s_per_token2 REAL NOT NULL,
                rmse_s REAL,
                r2 REAL,
                samples TEXT
            )"""
        )

    return migrations


class Store:
    """The prefixplan registry. Create with :func:`open_store`; close with :meth:`close`."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        from sqlite_utils import Database

        self.path = path
        self.conn = conn
        self.db = Database(conn)

    # -- plumbing ---------------------------------------------------------------------
    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on error."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"{self.path}: cannot start a write: {exc}") from exc
        try:
            yield self.conn
        except BaseException as exc:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"{self.path}: write failed: {exc}") from exc
            raise
        else:
            try:
                self.conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise StoreError(f"{self.path}: commit failed: {exc}") from exc

    def migrate(self) -> None:
        """Apply pending schema migrations (serialised across processes)."""
        migrations = _migrations()
        if not migrations.pending(self.db):
            return
        with self.write():
            migrations.apply(self.db)  # nested: runs in savepoints of our transaction

    # -- versions -----------------------------------------------------------------------
    def record_version(
        self,
        name: str,
        *,
        content_hash: str,
        kind: str,
        source: str,
        token_hash: str | None = None,
        token_count: int | None = None,
        token_ids: Any = None,
        tokenizer_fingerprint: str | None = None,
        namespace: str | None = None,
        retain_seconds: int = DEFAULT_RETAIN_SECONDS,
        pinned: bool = False,
        version: int | None = None,
        lineage: dict[str, Any] | None = None,
        now: float | None = None,
    ) -> VersionRecord:
        """Register a version of ``name`` (one transaction).

        With ``version=None`` the active version is returned when its ``content_hash`` is
        identical, otherwise the next version number is created. An explicit ``version``
        already stored with another hash raises :class:`KeyConflictError`; with the same
        hash it is returned unchanged. A new version higher than the active one makes the
        active one ``superseded`` with ``retain_until = now + its retain_seconds``.

        ``token_ids`` (stored as uint32 little-endian bytes) should be passed only when
        privacy allows storing the prefix's tokens.
        """
        if not NAME_RE.match(name):
            raise UsageError(f"invalid prefix name {name!r}")
        if version is not None and (not isinstance(version, int) or version < 1):
            raise UsageError(f"invalid version {version!r} for {name}")
        if retain_seconds < 0:
            raise UsageError(f"retain_seconds must be >= 0, got {retain_seconds}")
        ts = time.time() if now is None else now
        created = iso(ts)
        blob = token_ids_to_bytes(token_ids) if token_ids is not None else None
        if blob is not None and token_count is None:
            token_count = len(blob) // 4
        lineage_json = json.dumps(lineage, sort_keys=True, ensure_ascii=False) if lineage else None
        with self.write() as c:
            c.execute(
                "INSERT OR IGNORE INTO prefixes(name, kind, source, created, last_version) "
                "VALUES (?, ?, ?, ?, 0)",
                (name, kind, source, created),
            )
            active = c.execute(
                f"SELECT {_VERSION_COLS} FROM versions WHERE name = ? AND status = 'active' "
                "ORDER BY version DESC LIMIT 1",
                (name,),
            ).fetchone()
            active_rec = _row_to_record(active) if active else None
            if version is None:
                if active_rec is not None and active_rec.content_hash == content_hash:
                    return active_rec
                (last,) = c.execute(
                    "SELECT max(last_version, coalesce((SELECT max(version) FROM versions "
                    "WHERE name = ?), 0)) FROM prefixes WHERE name = ?",
                    (name, name),
                ).fetchone()
                version = int(last) + 1
            else:
                existing = c.execute(
                    f"SELECT {_VERSION_COLS} FROM versions WHERE name = ? AND version = ?",
                    (name, version),
                ).fetchone()
                if existing is not None:
                    rec = _row_to_record(existing)
                    if rec.content_hash != content_hash:
                        raise KeyConflictError(
                            f"{name}@v{version} is already registered with hash "
                            f"{rec.content_hash}; the content now hashes to {content_hash}",
                            hint=f"bump the version of {name} (e.g. to v{self._next(c, name)})",
                        )
                    return rec
                gone = c.execute(
                    "SELECT content_hash FROM collected WHERE name = ? AND version = ?", (name, version)
                ).fetchone()
                if gone is not None and gone[0] != content_hash:
                    # A collected number keeps its meaning: never reuse it for other content.
                    raise KeyConflictError(
                        f"{name}@v{version} was registered with hash {gone[0]} and has been collected",
                        hint=f"use a new version number (v{self._next(c, name)} or higher)",
                    )
            newer = active_rec is None or version > active_rec.version
            if newer and active_rec is not None:
                for vid, rsec in c.execute(
                    "SELECT id, retain_seconds FROM versions WHERE name = ? AND status = 'active'",
                    (name,),
                ).fetchall():
                    c.execute(
                        "UPDATE versions SET status = 'superseded', superseded_at = ?, "
                        "retain_until = ? WHERE id = ?",
                        (created, iso(ts + int(rsec)), vid),
                    )
            status = "active" if newer else "superseded"
            c.execute(
                "INSERT INTO versions(name, version, content_hash, token_hash, token_count, "
                "token_ids, tokenizer_fingerprint, namespace, kind, created, superseded_at, "
                "retain_until, status, retain_seconds, pinned, source, lineage) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    name,
                    version,
                    content_hash,
                    token_hash,
                    token_count,
                    blob,
                    tokenizer_fingerprint,
                    namespace,
                    kind,
                    created,
                    None if newer else created,
                    None if newer else iso(ts + retain_seconds),
                    status,
                    int(retain_seconds),
                    int(bool(pinned)),
                    source,
                    lineage_json,
                ),
            )
            c.execute(
                "UPDATE prefixes SET last_version = max(last_version, ?), kind = coalesce(kind, ?) "
                "WHERE name = ?",
                (version, kind, name),
            )
            row = c.execute(
                f"SELECT {_VERSION_COLS} FROM versions WHERE name = ? AND version = ?",
                (name, version),
            ).fetchone()
        return _row_to_record(row)

    def _next(self, c: sqlite3.Connection, name: str) -> int:
        (last,) = c.execute(
            "SELECT coalesce(max(last_version), 0) FROM prefixes WHERE name = ?", (name,)
        ).fetchone()
        return int(last) + 1

    def get(self, name: str, version: int | None = None) -> VersionRecord | None:
        """One version (``version=None``: the active one, else the latest)."""
        if version is None:
            row = self.conn.execute(
                f"SELECT {_VERSION_COLS} FROM versions WHERE name = ? "
                "ORDER BY status = 'active' DESC, version DESC LIMIT 1",
                (name,),
            ).fetchone()
        else:
            row = self.conn.execute(
                f"SELECT {_VERSION_COLS} FROM versions WHERE name = ? AND version = ?",
                (name, version),
            ).fetchone()
        return _row_to_record(row) if row else None

    def token_ids(self, name: str, version: int) -> list[int] | None:
        """Stored token ids of ``name@vN`` (None when not stored)."""
        from prefixplan.keys import token_ids_from_bytes

        row = self.conn.execute(
            "SELECT token_ids FROM versions WHERE name = ? AND version = ?", (name, version)
        ).fetchone()
        return token_ids_from_bytes(row[0]) if row and row[0] is not None else None

    def versions(self, name: str) -> list[VersionRecord]:
        """All stored versions of ``name``, oldest first."""
        rows = self.conn.execute(
            f"SELECT {_VERSION_COLS} FROM versions WHERE name = ? ORDER BY version", (name,)
        ).fetchall()
        return [_row_to_record(r) for r in rows]

    def list_keys(self, status: str | None = None) -> list[VersionRecord]:
        """All versions (optionally of one status), by name then version."""
        if status is not None and status not in STATUSES:
            raise UsageError(f"unknown status {status!r}", hint="use active, superseded or expired")
        sql = f"SELECT {_VERSION_COLS} FROM versions"
        args: tuple[Any, ...] = ()
        if status is not None:
            sql += " WHERE status = ?"
            args = (status,)
        rows = self.conn.execute(sql + " ORDER BY name, version", args).fetchall()
        return [_row_to_record(r) for r in rows]

    def expire(self, now: float | None = None) -> list[VersionRecord]:
        """Mark superseded versions past their ``retain_until`` as expired; return them."""
        stamp = iso(time.time() if now is None else now)
        with self.write() as c:
            rows = c.execute(
                f"SELECT {_VERSION_COLS} FROM versions WHERE status = 'superseded' "
                "AND retain_until IS NOT NULL AND retain_until <= ? ORDER BY name, version",
                (stamp,),
            ).fetchall()
            c.execute(
                "UPDATE versions SET status = 'expired' WHERE status = 'superseded' "
                "AND retain_until IS NOT NULL AND retain_until <= ?",
                (stamp,),
            )
        return [dataclasses.replace(_row_to_record(r), status="expired") for r in rows]

    def gc(self, dry_run: bool = True) -> list[VersionRecord]:
        """Delete expired versions (only report them when ``dry_run``); return them."""
        if dry_run:
            return self.list_keys("expired")
        with self.write() as c:
            rows = c.execute(
                f"SELECT {_VERSION_COLS} FROM versions WHERE status = 'expired' ORDER BY name, version"
            ).fetchall()
            c.execute(
                "INSERT OR REPLACE INTO collected(name, version, content_hash, collected) "
                "SELECT name, version, content_hash, ? FROM versions WHERE status = 'expired'",
                (iso(time.time()),),
            )
            c.execute("DELETE FROM versions WHERE status = 'expired'")
        return [_row_to_record(r) for r in rows]

    # -- lineages (for analyze) ------------------------------------------------------------
    def lineage_names(self, kind: str | None = None) -> list[LineageRow]:
        """Latest version of every prefix, with the lineage data analyze recorded for it."""
        sql = (
            "SELECT v.name, coalesce(v.kind, p.kind), v.version, v.lineage FROM versions v "
            "JOIN prefixes p ON p.name = v.name WHERE v.version = "
            "(SELECT max(version) FROM versions w WHERE w.name = v.name)"
        )
        rows = self.conn.execute(sql + " ORDER BY v.name").fetchall()
        out = []
        for name, k, version, lineage in rows:
            if kind is not None and k != kind:
                continue
            data = json.loads(lineage) if lineage else {}
            out.append(
                LineageRow(
                    name=name,
                    kind=k or "",
                    version=int(version),
                    system_head=data.get("system_head"),
                    tool_names=tuple(data.get("tool_names") or ()),
                )
            )
        return out

    # -- analyses and warm runs -------------------------------------------------------------
    def record_analysis(
        self,
        summary: dict[str, Any],
        candidates: Sequence[dict[str, Any]],
        log_paths: Sequence[str],
        record_path: str | None,
        *,
        now: float | None = None,
    ) -> int:
        """Store one analysis run and its ranked candidates; return the analysis id.

        Each candidate dict is stored whole as JSON; ``key``, ``kind``, ``token_count`` (or
        ``tokens``) and ``content_hash`` are also copied into columns when present.
        """
        created = iso(time.time() if now is None else now)
        with self.write() as c:
            cur = c.execute(
                "INSERT INTO analyses(created, log_paths, summary, record_path) VALUES (?, ?, ?, ?)",
                (
                    created,
                    json.dumps(list(map(str, log_paths))),
                    json.dumps(summary, default=str),
                    record_path,
                ),
            )
            aid = int(cur.lastrowid or 0)
            for rank, cand in enumerate(candidates, start=1):
                c.execute(
                    "INSERT INTO analysis_candidates(analysis_id, rank, key, kind, token_count, "
                    "content_hash, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        aid,
                        int(cand.get("rank", rank)),
                        cand.get("key"),
                        cand.get("kind"),
                        cand.get("token_count", cand.get("tokens")),
                        cand.get("content_hash"),
                        json.dumps(cand, default=str),
                    ),
                )
        return aid

    def analyses(self) -> list[dict[str, Any]]:
        """All analyses, newest first (summary decoded)."""
        rows = self.conn.execute(
            "SELECT id, created, log_paths, summary, record_path FROM analyses ORDER BY id DESC"
        ).fetchall()
        return [
            {
                "id": r[0],
                "created": r[1],
                "log_paths": json.loads(r[2]),
                "summary": json.loads(r[3]),
                "record_path": r[4],
            }
            for r in rows
        ]

    def analysis_candidates(self, analysis_id: int) -> list[dict[str, Any]]:
        """Candidates of one analysis in rank order (the stored dicts)."""
        rows = self.conn.execute(
            "SELECT data FROM analysis_candidates WHERE analysis_id = ? ORDER BY rank", (analysis_id,)
        ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def record_warm_run(self, *, now: float | None = None, **fields: Any) -> int:
        """Store one warm attempt; known columns are filled, everything else goes to ``data``."""
        cols = (
            "endpoint",
            "key",
            "version",
            "tokens",
            "cold_ttft",
            "warm_ttft",
            "cached_tokens",
            "status",
            "error",
        )
        row = {k: fields.pop(k) for k in cols if k in fields}
        row["created"] = iso(time.time() if now is None else now)
        row["data"] = json.dumps(fields, default=str) if fields else None
        names = ", ".join(row)
        with self.write() as c:
            cur = c.execute(
                f"INSERT INTO warm_runs({names}) VALUES ({', '.join('?' for _ in row)})",
                tuple(row.values()),
            )
        return int(cur.lastrowid or 0)

    def warm_runs(self, key: str | None = None) -> list[dict[str, Any]]:
        """Warm runs, oldest first (optionally of one key)."""
        sql = "SELECT * FROM warm_runs"
        args: tuple[Any, ...] = ()
        if key is not None:
            sql += " WHERE key = ?"
            args = (key,)
        cur = self.conn.execute(sql + " ORDER BY id", args)
        names = [d[0] for d in cur.description]
        out = []
        for r in cur.fetchall():
            d = dict(zip(names, r, strict=True))
            d["data"] = json.loads(d["data"]) if d.get("data") else None
            out.append(d)
        return out

    # -- prefill profiles (calibrate) ------------------------------------------------------
    _PROFILE_COLS = ("name", "created", "endpoint", "model", "a_s", "b_s_per_token", "c_s_per_token2", "rmse_s", "r2")

    def save_profile(
        self,
        name: str,
        *,
        a_s: float,
        b_s_per_token: float,
        c_s_per_token2: float,
        endpoint: str | None = None,
        model: str | None = None,
        rmse_s: float | None = None,
        r2: float | None = None,
        samples: Any = None,
        created: str | None = None,
    ) -> None:
        """Store (or replace) the prefill profile ``name`` (``samples`` is stored as JSON)."""
        if not name or not name.strip():
            raise UsageError("a profile needs a non-empty name")
        row = (name, created or iso(time.time()), endpoint, model, float(a_s), float(b_s_per_token),
               float(c_s_per_token2), rmse_s, r2, json.dumps(samples) if samples is not None else None)
        with self.write() as c:
            c.execute(
                "INSERT OR REPLACE INTO profiles(name, created, endpoint, model, a_s, b_s_per_token, "
                "c_s_per_token2, rmse_s, r2, samples) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )

    def get_profile(self, name: str) -> dict[str, Any] | None:
        """The stored profile ``name`` (``samples`` decoded), or None."""
        cur = self.conn.execute("SELECT * FROM profiles WHERE name = ?", (name,))
        r = cur.fetchone()
        if r is None:
            return None
        d = dict(zip([x[0] for x in cur.description], r, strict=True))
        d["samples"] = json.loads(d["samples"]) if d.get("samples") else None
        return d

    def profiles(self) -> list[dict[str, Any]]:
        """All stored profiles by name (without samples)."""
        cols = ", ".join(self._PROFILE_COLS)
        cur = self.conn.execute(f"SELECT {cols} FROM profiles ORDER BY name")
        return [dict(zip(self._PROFILE_COLS, r, strict=True)) for r in cur.fetchall()]

    def integrity_check(self) -> str:
        """Result of ``PRAGMA integrity_check`` (``"ok"`` when healthy)."""
        return str(self.conn.execute("PRAGMA integrity_check").fetchone()[0])


def find_profile(name: str, path: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The stored prefill profile ``name`` from the store at ``path`` (default as :func:`open_store`),
    or None; an absent store file is not created."""
    if not resolve_db_path(path).is_file():
        return None
    with open_store(path) as store:
        return store.get_profile(name)


def open_store(path: str | os.PathLike[str] | None = None, *, migrate: bool = True) -> Store:
    """Open (creating and migrating) the store at ``path`` / ``$PREFIXPLAN_DB`` / ``./prefixplan.db``.

    Raises:
        StoreError: the file cannot be opened, put in WAL mode or migrated.
    """
    db_path = resolve_db_path(path)
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
    try:
        store.migrate()
    except (sqlite3.Error, StoreError) as exc:
        store.close()
        if isinstance(exc, StoreError):
            raise
        raise StoreError(f"cannot migrate store {db_path}: {exc}") from exc
    return store
