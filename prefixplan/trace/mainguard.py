"""Render workers and scripts without a main guard.

Local render workers start from a fork server or by spawning, and either way each worker runs
the caller's script again before it takes work (Python's ``multiprocessing`` prepares every
child so). A script that calls prefixplan at its top level, outside an
``if __name__ == "__main__":`` block, would start the analysis again in every worker.
:func:`unguarded_call` finds that case, so that the run renders in the calling process instead
and says what to add for it to use every core.
"""

from __future__ import annotations

import ast
import os
import sys
from functools import lru_cache


def unguarded_call() -> str | None:
    """``FILE:LINE`` of the script statement this call came from when it runs at the script's
    top level outside an ``if __name__ == "__main__":`` block; None otherwise (a guarded call,
    a call from a function or a module, an interactive session, a notebook)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str):
        return None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals is main.__dict__ and _same_file(frame.f_code.co_filename, path):
            if frame.f_code.co_name != "<module>":
                return None  # called from a function of the script: its caller decides
            return None if _guarded(path, frame.f_lineno) else f"{path}:{frame.f_lineno}"
        # code the script runs with exec() shares its globals but not its lines: the exec
        # statement's own frame, further out, says whether the call is guarded
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _same_file(code_file: str, path: str) -> bool:
    return code_file == path or os.path.abspath(code_file) == os.path.abspath(path)


def _guarded(path: str, line: int) -> bool:
    """True when ``line`` of the script lies inside an ``if __name__ == "__main__":`` block
    (or the script cannot be read: nothing to warn about then)."""
    blocks = _main_blocks(path)
    return blocks is None or any(a <= line <= b for a, b in blocks)


@lru_cache(maxsize=8)
def _main_blocks(path: str) -> tuple[tuple[int, int], ...] | None:
    try:
        with open(path, "rb") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return None
    return tuple(
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_main_test(node.test)
    )


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1
