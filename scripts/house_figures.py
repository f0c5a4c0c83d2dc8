"""Figures of the package's shape for docs/architecture.md: folders, modules, lines, the largest
module and function, the CLI's lines, the longest CLI function, and import cycles.

    python scripts/house_figures.py            # a Markdown table row per figure
    python scripts/house_figures.py --json     # the same as JSON

Lines are physical lines of ``prefixplan/**/*.py``. Functions are measured from their ``def`` to
their last line (nested functions counted in their parent too).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "prefixplan"


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports. Lazy imports count; so does a package's
    ``__init__`` when a module takes a name from it (``from prefixplan.logs import LineErrors``),
    and when importing a submodule runs it, except the module's own enclosing packages, which
    Python has always imported first (that edge is in every module and no re-export's doing)."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            wanted: list[tuple[str, bool]] = []  # (module, taken by name from it)
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    wanted.append((sub, False) if sub in modules else (node.module, True))
            elif isinstance(node, ast.Import):
                wanted = [(a.name, False) for a in node.names]
            for target, by_name in wanted:
                if not target.startswith("prefixplan") or target == name:
                    continue
                parts = target.split(".")
                for i in range(2, len(parts) + 1):  # importing a.b.c runs a.b's __init__ first
                    candidate = ".".join(parts[:i])
                    if candidate not in modules or candidate == name:
                        continue
                    if candidate in ancestors and not (by_name and candidate == target):
                        continue
                    graph[name].add(candidate)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def functions(path: Path) -> list[tuple[int, str]]:
    """(lines, qualified name) of every function in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((node.end_lineno - node.lineno + 1, f"{_module(path)}.{node.name}"))
    return out


def figures() -> dict[str, object]:
    files = sorted(PACKAGE.rglob("*.py"))
    sizes = {_module(p): len(p.read_text(encoding="utf-8").splitlines()) for p in files}
    funcs = [f for p in files for f in functions(p)]
    cli = [p for p in files if p.parent.name == "cli"]
    cli_funcs = [f for p in cli for f in functions(p)]
    largest = max(sizes.items(), key=lambda kv: kv[1])
    longest = max(funcs)
    longest_cli = max(cli_funcs)
    return {
        "folders": len({p.parent for p in files}),
        "modules": len(files),
        "lines": sum(sizes.values()),
        "largest_module": f"{largest[0]} ({largest[1]})",
        "modules_over_450": sum(1 for n in sizes.values() if n > 450),
        "longest_function": f"{longest[1]} ({longest[0]})",
        "cli_lines": sum(sizes[_module(p)] for p in cli),
        "longest_cli_function": f"{longest_cli[1]} ({longest_cli[0]})",
        "cli_functions_over_80": sum(1 for n, _ in cli_funcs if n > 80),
        "import_cycles": len(cycles(import_graph())),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    data = figures()
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        for key, value in data.items():
            print(f"| {key.replace('_', ' ')} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
