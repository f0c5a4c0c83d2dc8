"""Optional dependencies: import one, or say which ``pip install "prefixplan[EXTRA]"`` provides it."""

from __future__ import annotations

import importlib
from types import ModuleType

from prefixplan.errors import UsageError


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``; a missing one is a :class:`UsageError` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"{module} is not installed ({exc})", hint=f'pip install "prefixplan[{extra}]"') from None
