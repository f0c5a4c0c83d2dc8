"""The SQLite store: versions, retention lifecycle, analyses, warm runs, path resolution."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

from prefixplan.errors import KeyConflictError, StoreError, UsageError
from prefixplan.keys import content_hash, token_hash
from prefixplan.store import open_store, resolve_db_path

DAY = 86400
T0 = 1_700_000_000.0


def h(text: str) -> str:
    return content_hash([("system", text.encode())])


def test_path_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFIXPLAN_DB", str(tmp_path / "env.db"))
    assert resolve_db_path("explicit.db") == Path("explicit.db")
    assert resolve_db_path(None) == tmp_path / "env.db"
    monkeypatch.delenv("PREFIXPLAN_DB")
    assert resolve_db_path(None) == Path("prefixplan.db")
    monkeypatch.setenv("PREFIXPLAN_DB", str(tmp_path / "env.db"))
    with open_store() as store:
        assert store.path == tmp_path / "env.db"
    assert (tmp_path / "env.db").exists()


def test_wal_and_migrations_recorded(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_store(path):
        pass
    with open_store(path):  # re-opening applies nothing twice
        pass
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    rows = conn.execute("SELECT migration_set, name FROM _sqlite_migrations").fetchall()
    assert rows == [
        ("prefixplan", "001_initial"),
        ("prefixplan", "002_profiles"),
        ("prefixplan", "003_gateway"),
        ("prefixplan", "004_gateway_owners"),
    ]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"prefixes", "versions", "analyses", "analysis_candidates", "warm_runs"} <= tables


def test_auto_versioning_and_supersede() -> None:
    with open_store() as s:
        v1 = s.record_version("support-bot", content_hash=h("a"), kind="system", source="test", now=T0)
        same = s.record_version("support-bot", content_hash=h("a"), kind="system", source="test", now=T0 + 5)
        assert (v1.version, same.version, same.created) == (1, 1, v1.created)
        v2 = s.record_version(
            "support-bot", content_hash=h("b"), kind="system", source="test", retain_seconds=2 * DAY, now=T0 + 100
        )
        assert v2.version == 2 and v2.status == "active"
        old = s.get("support-bot", 1)
        assert old is not None and old.status == "superseded"
        assert old.superseded_at == "2023-11-14T22:15:00Z"  # T0 + 100 s
        assert old.retain_until == "2023-11-21T22:15:00Z"  # its own 7-day retention from supersede time
        assert [r.status for r in s.versions("support-bot")] == ["superseded", "active"]
        assert s.get("support-bot").version == 2  # type: ignore[union-attr]
        # going back to old content is a new version, not a reuse of v1
        v3 = s.record_version("support-bot", content_hash=h("a"), kind="system", source="test", now=T0 + 200)
        assert v3.version == 3


def test_explicit_versions_and_conflicts() -> None:
    with open_store() as s:
        s.record_version("agent", version=2, content_hash=h("x"), kind="system+tools", source="recipe", now=T0)
        again = s.record_version("agent", version=2, content_hash=h("x"), kind="system+tools", source="recipe")
        assert again.version == 2
        with pytest.raises(KeyConflictError, match=r"agent@v2 is already registered") as exc:
            s.record_version("agent", version=2, content_hash=h("y"), kind="system+tools", source="recipe")
        assert "bump" in (exc.value.hint or "")
        assert s.get("agent", 2).content_hash == h("x")  # type: ignore[union-attr]
        s.record_version("agent", version=5, content_hash=h("z"), kind="system+tools", source="recipe", now=T0 + 1)
        assert [(r.version, r.status) for r in s.versions("agent")] == [(2, "superseded"), (5, "active")]
        # an older number registered late stays superseded and does not demote v5
        late = s.record_version(
            "agent", version=4, content_hash=h("w"), kind="system+tools", source="recipe", now=T0 + 2
        )
        assert late.status == "superseded" and s.get("agent").version == 5  # type: ignore[union-attr]
        with pytest.raises(UsageError):
            s.record_version("bad name", content_hash=h("x"), kind="system", source="t")


def test_expire_and_gc_lifecycle() -> None:
    with open_store() as s:
        s.record_version("p", content_hash=h("1"), kind="system", source="t", retain_seconds=DAY, now=T0)
        s.record_version("p", content_hash=h("2"), kind="system", source="t", now=T0 + 10)
        assert s.expire(now=T0 + 10 + DAY - 1) == []
        assert s.gc(dry_run=True) == []
        expired = s.expire(now=T0 + 10 + DAY)
        assert [(str(r.key), r.status) for r in expired] == [("p@v1", "expired")]
        assert [str(r.key) for r in s.list_keys("expired")] == ["p@v1"]
        assert [str(r.key) for r in s.gc(dry_run=True)] == ["p@v1"]
        assert len(s.versions("p")) == 2  # dry run deleted nothing
        assert [str(r.key) for r in s.gc(dry_run=False)] == ["p@v1"]
        assert [r.version for r in s.versions("p")] == [2]
        # a collected number is never reused
        assert s.record_version("p", content_hash=h("3"), kind="system", source="t").version == 3
        with pytest.raises(KeyConflictError):
            s.record_version("p", version=1, content_hash=h("9"), kind="system", source="t")
        with pytest.raises(UsageError):
            s.list_keys("bogus")


def test_token_ids_and_hash_stored() -> None:
    ids = [151644, 8948, 198, 2610, 525]
    with open_store() as s:
        rec = s.record_version(
            "sys",
            content_hash=h("s"),
            kind="system",
            source="analysis",
            token_hash=token_hash("fp", ids),
            token_ids=ids,
            tokenizer_fingerprint="fp",
            namespace="Qwen/Qwen3-8B",
        )
        assert rec.token_count == 5 and rec.has_token_ids
        assert s.token_ids("sys", 1) == ids
        private = s.record_version(
            "priv",
            content_hash=h("p"),
            kind="system",
            source="analysis",
            token_hash=token_hash("fp", ids),
            token_count=5,
        )
        assert not private.has_token_ids and s.token_ids("priv", 1) is None


def test_analyses_candidates_warm_runs_lineage() -> None:
    with open_store() as s:
        aid = s.record_analysis(
            {"requests": 10, "schema_version": 1},
            [{"key": "support-bot@v1", "kind": "system", "tokens": 900}, {"kind": "tools", "token_count": 300}],
            ["examples/log.jsonl"],
            "out.json",
        )
        assert s.analyses()[0]["summary"]["requests"] == 10
        assert [c["kind"] for c in s.analysis_candidates(aid)] == ["system", "tools"]
        wid = s.record_warm_run(
            endpoint="http://a:8000",
            key="support-bot@v1",
            version=1,
            tokens=900,
            cached_tokens=896,
            status="verified",
            replica="a-0",
        )
        runs = s.warm_runs("support-bot@v1")
        assert runs[0]["id"] == wid and runs[0]["cached_tokens"] == 896 and runs[0]["data"] == {"replica": "a-0"}
        s.record_version(
            "tools-a-b", content_hash=h("t"), kind="tools", source="analysis", lineage={"tool_names": ["a", "b"]}
        )
        rows = s.lineage_names()
        assert [(r.name, r.kind, r.tool_names) for r in rows] == [("tools-a-b", "tools", ("a", "b"))]


def test_readable_with_plain_sqlite3_cli(tmp_path: Path) -> None:
    path = tmp_path / "cli.db"
    with open_store(path) as s:
        s.record_version("support-bot", content_hash=h("a"), kind="system", source="t")
    proc = subprocess.run(
        ["sqlite3", str(path), "SELECT name || '@v' || version, status FROM versions"], capture_output=True, text=True
    )
    if proc.returncode == 127:  # pragma: no cover
        pytest.skip("sqlite3 CLI not installed")
    assert proc.stdout.strip() == "support-bot@v1|active"


def test_unusable_store_path_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreError, match="cannot open store"):
        open_store(blocker / "sub" / "s.db")


def test_sqlite_failure_inside_a_write_is_a_store_error_and_rolls_back(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as store:
        with pytest.raises(StoreError, match="write failed"), store.write() as c:
            c.execute(
                "INSERT INTO profiles(name, created, a_s, b_s_per_token, c_s_per_token2) VALUES ('p', 'now', 0, 0, 0)"
            )
            c.execute("INSERT INTO no_such_table VALUES (1)")
        assert not store.conn.in_transaction
        assert store.profiles() == []
