"""Benchmarks stay runnable: every module imports, and every prefixplan name a benchmark imports,
at the top or inside a function, exists (a renamed function would otherwise break a benchmark
only when someone runs it)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
FILES = sorted(BENCH.glob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_benchmark_imports_resolve(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_check_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    missing = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("prefixplan"):
            target = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(target, alias.name) and f"{node.module}.{alias.name}" not in sys.modules:
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        missing.append(f"{node.lineno}: from {node.module} import {alias.name}")
    assert missing == []
