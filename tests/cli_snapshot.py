"""Snapshots of the command line's contract: every command's ``--help`` and the ``--json`` of the
commands that read the bundled example log, with what varies from run to run (timings, dates,
paths, the version) replaced by placeholders.

    python tests/cli_snapshot.py --write     # record tests/snapshots/cli/ (after a deliberate change)

``tests/test_cli_snapshot.py`` compares the live output with the recorded one, so a restructuring
of the CLI or the library behind it keeps flags, texts and results as they are.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "tests" / "snapshots" / "cli"
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"
VOLATILE_KEYS = re.compile(
    r"(elapsed|_seconds$|^seconds$|created|timestamp|^version$|prefixplan_version|duration|_s$|^wall)"
)
JSON_RUNS: dict[str, list[str]] = {
    "analyze": ["analyze", str(EXAMPLE), "--no-store", "-q", "--top", "5"],
    "simulate": ["simulate", str(EXAMPLE), "-q", "--capacity", "2e4,1e5", "--policy", "lru,lfu"],
    "simulate-fleet": ["simulate", str(EXAMPLE), "-q", "--replicas", "2", "--router", "round-robin,cache-aware,keyed"],
    "formats": ["formats"],
}


def _leaves(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in sorted((getattr(command, "commands", None) or {}).items()):
        yield from _leaves(sub, (*path, name))


@contextlib.contextmanager
def _fixed_terminal() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("COLUMNS", "LINES", "NO_COLOR", "TERM", "FORCE_COLOR")}
    os.environ.update(COLUMNS="100", LINES="50", NO_COLOR="1", TERM="dumb")
    os.environ.pop("FORCE_COLOR", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run(argv: list[str]) -> tuple[int, str]:
    from prefixplan.cli.app import main

    out = io.StringIO()
    with _fixed_terminal(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    return code, out.getvalue()


def _scrub(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: ("<varies>" if VOLATILE_KEYS.search(k) else _scrub(v, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, key) for v in value]
    if isinstance(value, str):
        return value.replace(str(ROOT), "<root>")
    if isinstance(value, float):
        return float(f"{value:.9g}")  # the last bits of a float sum are not part of the contract
    return value


def helps() -> dict[str, str]:
    import typer

    from prefixplan.cli.app import build_app

    out = {}
    for path in _leaves(typer.main.get_command(build_app())):
        code, text = _run([*path, "--help"])
        out["help/" + ("-".join(path) or "prefixplan") + ".txt"] = f"exit {code}\n{text}"
    return out


def jsons() -> dict[str, str]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in JSON_RUNS.items():
            target = str(Path(tmp) / f"{name}.json")
            code, _ = _run([*argv, "--json", target])
            doc = json.loads(Path(target).read_text()) if Path(target).is_file() else None
            out[f"json/{name}.json"] = json.dumps({"exit": code, "doc": _scrub(doc)}, indent=1, sort_keys=True) + "\n"
    return out


def snapshot() -> dict[str, str]:
    return {**helps(), **jsons()}


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print(__doc__)
        return 2
    for rel, text in snapshot().items():
        path = SNAPSHOTS / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
