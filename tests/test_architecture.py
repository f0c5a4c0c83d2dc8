"""The one-way flow, enforced: the packages' imports (read with ast) follow the declared DAG, that
DAG is acyclic and every edge of it is used, no module takes part in an import cycle, and
``prefixplan --help`` imports none of the heavy libraries.

A package may import itself and the packages :data:`DEPENDS` lists for it (docs/architecture.md);
imports under ``if TYPE_CHECKING:`` and inside functions count too (a lazy import is still a
dependency), and so does ``from prefixplan import ...`` (the package root is a layer of its own).
"""

from __future__ import annotations

import json
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import house_figures  # noqa: E402

BOTTOM = {"errors", "version"}
DEPENDS: dict[str, set[str]] = {
    "errors": set(),
    "version": set(),
    "core": {"errors"},
    "routing": {"errors"},
    "logs": {"core", "errors"},
    "render": {"core", "errors", "logs"},
    "trace": {"core", "errors", "logs", "render", "routing", "version"},
    "analysis": {"core", "errors", "logs", "render", "trace", "version"},
    "savings": {"core", "errors"},
    "simulation": {"analysis", "core", "errors", "logs", "render", "routing", "savings", "trace"},
    "keys": {"analysis", "core", "errors", "logs", "render"},
    "store": {"analysis", "errors", "keys", "savings"},
    "gate": {"analysis", "core", "errors", "keys", "render"},
    "engines": {"core", "errors"},
    "warming": {"analysis", "core", "engines", "errors", "keys", "logs", "render", "savings", "store"},
    "gateway": {"core", "engines", "errors", "keys", "residency", "routing", "store", "warming"},
    "residency": {"core", "trace"},
    "report": {"analysis", "core", "errors", "gate", "logs", "savings", "simulation"},
    "api": {
        "analysis",
        "core",
        "errors",
        "gate",
        "gateway",
        "keys",
        "logs",
        "render",
        "report",
        "routing",
        "simulation",
        "store",
        "trace",
        "warming",
    },
    "cli": {"api", "core", "errors", "render", "report", "simulation", "version"},
    "__main__": {"cli"},
    "__root__": {"analysis", "api", "errors", "keys", "simulation", "version"},
}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__root__"


def package_edges() -> dict[tuple[str, str], str]:
    """(package, package it imports) -> one module that does it."""
    out: dict[tuple[str, str], str] = {}
    for module, targets in house_figures.import_graph().items():
        for target in targets:
            edge = (_package(module), _package(target))
            if edge[0] != edge[1]:
                out.setdefault(edge, f"{module} imports {target}")
    return out


def layering_violations() -> list[str]:
    bad = []
    for (a, b), where in sorted(package_edges().items()):
        if a not in DEPENDS:
            bad.append(f"{where}: package {a} is not declared in DEPENDS")
        elif b not in DEPENDS[a]:
            bad.append(f"{where}: {a} may not import {b}")
    return bad


def test_every_import_follows_the_declared_graph() -> None:
    assert layering_violations() == []


def test_the_declared_graph_is_acyclic_and_every_edge_is_used() -> None:
    try:
        list(TopologicalSorter(DEPENDS).static_order())
    except CycleError as err:  # pragma: no cover - the assertion names the cycle
        pytest.fail(f"DEPENDS has a cycle: {err.args[1]}")
    used = set(package_edges())
    unused = sorted((a, b) for a, deps in DEPENDS.items() for b in deps if (a, b) not in used)
    assert unused == [], "declared but unused (tighten DEPENDS)"


def test_no_module_is_in_an_import_cycle() -> None:
    assert house_figures.cycles(house_figures.import_graph()) == []


def test_the_checker_catches_an_upward_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The check itself must be able to fail: a lower layer importing a higher one is reported,
    # and two modules importing each other are a cycle.
    pkg = tmp_path / "prefixplan" / "analysis"
    pkg.mkdir(parents=True)
    (pkg / "bad.py").write_text("from prefixplan.warming.plan import WarmPlan\n")
    (pkg / "one.py").write_text("from prefixplan.analysis import two\n")
    (pkg / "two.py").write_text("def f():\n    from prefixplan.analysis.one import x\n")
    (tmp_path / "prefixplan" / "warming").mkdir()
    (tmp_path / "prefixplan" / "warming" / "plan.py").write_text("WarmPlan = 1\n")
    monkeypatch.setattr(house_figures, "ROOT", tmp_path)
    monkeypatch.setattr(house_figures, "PACKAGE", tmp_path / "prefixplan")
    (bad,) = layering_violations()
    assert "analysis may not import warming" in bad
    assert house_figures.cycles(house_figures.import_graph()) == [
        ["prefixplan.analysis.one", "prefixplan.analysis.two"]
    ]


HEAVY = ("transformers", "numpy", "httpx", "openai", "tokenizers", "tiktoken", "mistral_common", "torch")


def test_help_imports_no_heavy_library() -> None:
    code = (
        "import sys, json, contextlib, io\n"
        "from prefixplan.cli.app import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(['--help'])\n"
        f"print(json.dumps({{'rc': rc, 'loaded': sorted(m for m in {HEAVY!r} if m in sys.modules)}}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"rc": 0, "loaded": []}


def test_importing_the_package_is_light() -> None:
    code = f"import sys, json\nimport prefixplan\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
