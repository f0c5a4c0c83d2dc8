"""Shared test fixtures. Every test runs with its own store and home folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def _session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache folder for the session (tokenizer snapshots are named by their content)."""
    return tmp_path_factory.mktemp("prefixplan-cache")


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _session_cache: Path) -> None:
    """Point the store at a temp file so no test touches ./prefixplan.db, and the cache at the
    session's folder so no test touches the user's."""
    monkeypatch.setenv("PREFIXPLAN_DB", str(tmp_path / "prefixplan.db"))
    monkeypatch.setenv("PREFIXPLAN_CACHE_DIR", str(_session_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    # pytest-xdist's workers inherit COLUMNS=80: every test sees the terminal a plain run sees
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


def qwen3_dir() -> Path | None:
    """Folder of the real Qwen3 tokenizer (scripts/fetch_tokenizers.py), or None."""
    path = Path(os.environ.get("PREFIXPLAN_QWEN3_DIR", ROOT / ".cache" / "tokenizers" / "qwen3"))
    return path if (path / "tokenizer.json").is_file() else None


@pytest.fixture(scope="session")
def qwen3_path() -> Path:
    path = qwen3_dir()
    if path is None:
        pytest.skip("Qwen3 tokenizer not fetched: run python scripts/fetch_tokenizers.py")
    return path


SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA
