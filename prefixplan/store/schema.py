"""The store schema: ``sqlite_utils.Migrations`` set ``prefixplan``, applied in order."""

from __future__ import annotations

from typing import Any


def migrations() -> Any:
    """The migration set (each applied once, in one transaction with its bookkeeping row)."""
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

    @migrations(name="003_gateway")
    def _gateway(db: Any) -> None:
        # What `prefixplan gateway` keeps per key version (the exact parts it expands), per
        # (key, replica) warm state, and per (key, replica) hit statistics (`status --keys`).
        db.execute(
            """CREATE TABLE gateway_parts (
                name TEXT NOT NULL,
                version INTEGER NOT NULL,
                wire_hash TEXT NOT NULL,
                render TEXT NOT NULL,
                parts TEXT NOT NULL,
                PRIMARY KEY (name, version)
            )"""
        )
        db.execute(
            """CREATE TABLE gateway_warm (
                key TEXT NOT NULL,
                replica TEXT NOT NULL,
                status TEXT NOT NULL,
                updated TEXT NOT NULL,
                PRIMARY KEY (key, replica)
            )"""
        )
        db.execute(
            """CREATE TABLE gateway_key_stats (
                key TEXT NOT NULL,
                replica TEXT NOT NULL,
                requests INTEGER NOT NULL DEFAULT 0,
                errors INTEGER NOT NULL DEFAULT 0,
                prompt_tokens INTEGER NOT NULL DEFAULT 0,
                cached_tokens INTEGER NOT NULL DEFAULT 0,
                ttft_sum_s REAL NOT NULL DEFAULT 0,
                ttft_count INTEGER NOT NULL DEFAULT 0,
                updated TEXT NOT NULL,
                PRIMARY KEY (key, replica)
            )"""
        )

    @migrations(name="004_gateway_owners")
    def _gateway_owners(db: Any) -> None:
        # Gateway keys get owners (tenants): each tenant has its own namespace of names, so the
        # versions live in their own table keyed by (owner, name, version) instead of beside the
        # repository's `versions`. `gateway_names` holds each name's highest and active version,
        # `gateway_audit` who registered what, `gateway_meta` the state's epoch.
        db.execute("DROP TABLE IF EXISTS gateway_parts")
        db.execute(
            """CREATE TABLE gateway_keys (
                owner TEXT NOT NULL,
                name TEXT NOT NULL,
                version INTEGER NOT NULL CHECK (version >= 1),
                content_hash TEXT NOT NULL,
                wire_hash TEXT NOT NULL,
                render TEXT NOT NULL,
                parts TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('active', 'superseded', 'expired')),
                retain_seconds INTEGER NOT NULL,
                retain_until REAL,
                source TEXT NOT NULL,
                created REAL NOT NULL,
                PRIMARY KEY (owner, name, version)
            )"""
        )
        db.execute(
            """CREATE TABLE gateway_names (
                owner TEXT NOT NULL,
                name TEXT NOT NULL,
                last_version INTEGER NOT NULL,
                active_version INTEGER,
                PRIMARY KEY (owner, name)
            )"""
        )
        db.execute(
            """CREATE TABLE gateway_audit (
                id INTEGER PRIMARY KEY,
                ts REAL NOT NULL,
                tenant TEXT NOT NULL,
                client TEXT NOT NULL,
                event TEXT NOT NULL,
                key TEXT NOT NULL,
                content_hash TEXT,
                detail TEXT
            )"""
        )
        db.execute("CREATE TABLE gateway_meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")

    return migrations
