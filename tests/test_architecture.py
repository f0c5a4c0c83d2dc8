"""The one-way flow, enforced: every module's imports (read with ast) respect the layer order, and
``prefixplan --help`` imports none of the heavy libraries.

Layer order (docs/architecture.md): errors, core -> logs -> render -> trace -> analysis -> savings ->
simulation -> keys -> store -> gate -> engines -> warming -> gateway -> report -> api -> cli (-> __main__). A module may import
its own package and any package to its left; imports under ``if TYPE_CHECKING:`` and inside
functions count too (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "prefixplan"
LAYERS = (
    "errors",
    "core",
    "logs",
    "render",
    "trace",
    "analysis",
    "savings",
    "simulation",
    "keys",
    "store",
    "gate",
    "engines",
    "warming",
    "gateway",
    "report",
    "api",
    "cli",
    "__main__",  # python -m prefixplan: the entry point above the CLI
)
RANK = {name: i for i, name in enumerate(LAYERS)}
RANK["errors"] = RANK["core"] = 0  # one bottom layer: the error hierarchy and shared records


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "prefixplan" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, imported module, names) for every prefixplan import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.startswith("prefixplan")
        ):
            out.append((node.lineno, node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("prefixplan"):
                    out.append((node.lineno, alias.name, ()))
    return out


def layering_violations() -> list[str]:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        own = _layer(module)
        if own is None:  # the package root: it may re-export the public API lazily
            continue
        for line, target, names in _imports(path):
            layer = _layer(target)
            if layer is None:
                # ``from prefixplan import X``: only the version string lives at the root
                if set(names) - {"__version__"}:
                    bad.append(f"{path.relative_to(ROOT)}:{line}: imports {names} from the package root")
                continue
            if layer not in RANK:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {target} is in no declared layer")
            elif own not in RANK:
                bad.append(f"{path.relative_to(ROOT)}: module {module} is in no declared layer")
            elif RANK[layer] > RANK[own]:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {own} imports {target} (layer {layer} is above it)")
    return bad


def test_every_import_follows_the_layer_order() -> None:
    assert layering_violations() == []


def test_the_checker_catches_an_upward_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The check itself must be able to fail: a lower layer importing a higher one is reported.
    fake_root = tmp_path
    pkg = fake_root / "prefixplan" / "analysis"
    pkg.mkdir(parents=True)
    (pkg / "bad.py").write_text("from prefixplan.warming.plan import WarmPlan\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake_root)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake_root / "prefixplan")
    (bad,) = layering_violations()
    assert "analysis imports prefixplan.warming.plan" in bad


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
