"""Table family ``prefixes`` / ``versions`` / ``collected``: register, read, expire and collect ``name@vN``."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from prefixplan.errors import KeyConflictError, UsageError
from prefixplan.keys import DEFAULT_RETAIN_SECONDS, NAME_RE, CacheKey, token_ids_from_bytes, token_ids_to_bytes
from prefixplan.keys.lineage import LineageRow
from prefixplan.store.base import STATUSES, StoreBase, iso


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


class VersionsMixin(StoreBase):
    """Versions of named prefixes (methods of :class:`~prefixplan.store.Store`)."""

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
                "INSERT OR IGNORE INTO prefixes(name, kind, source, created, last_version) VALUES (?, ?, ?, ?, 0)",
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
                        "UPDATE versions SET status = 'superseded', superseded_at = ?, retain_until = ? WHERE id = ?",
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
                "UPDATE prefixes SET last_version = max(last_version, ?), kind = coalesce(kind, ?) WHERE name = ?",
                (version, kind, name),
            )
            row = c.execute(
                f"SELECT {_VERSION_COLS} FROM versions WHERE name = ? AND version = ?",
                (name, version),
            ).fetchone()
        return _row_to_record(row)

    def _next(self, c: sqlite3.Connection, name: str) -> int:
        (last,) = c.execute("SELECT coalesce(max(last_version), 0) FROM prefixes WHERE name = ?", (name,)).fetchone()
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
