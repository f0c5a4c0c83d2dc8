"""Reading files at a git ref (the base lock, the previous content of a changed part)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git_show(ref: str, path: Path) -> bytes | None:
    """Bytes of ``path`` at git ``ref`` (``git show REF:./path``), or None when absent."""
    path = Path(path).resolve()
    folder = path.parent
    while not folder.exists():  # pragma: no cover - a deleted folder
        folder = folder.parent
    rel = os.path.relpath(path, folder)
    try:
        proc = subprocess.run(
            ["git", "-C", str(folder), "show", f"{ref}:./{Path(rel).as_posix()}"],
            capture_output=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_ref_exists(ref: str, cwd: Path) -> bool:
    try:
        proc = subprocess.run(
            ["git", "-C", str(cwd), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
            capture_output=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0
