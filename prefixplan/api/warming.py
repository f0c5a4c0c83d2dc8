"""``prefixplan warm``: send the top prefixes to every replica and verify each hit."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefixplan.warming.service import WarmOutcome


def warm(
    endpoints: Sequence[str] = (),
    *,
    top: int | None = None,
    analysis: str | os.PathLike[str] | None = None,
    recipes: str | os.PathLike[str] | None = None,
    keys: Sequence[str] = (),
    endpoints_file: str | os.PathLike[str] | None = None,
    dry_run: bool = False,
    db: str | None = None,
    **options: Any,
) -> WarmOutcome:
    """Send the top prefixes to every replica and verify each hit (``prefixplan warm``).

    ``options`` are :class:`prefixplan.warming.service.WarmRequest` fields (``budget_gb``,
    ``api_key_env``, ``tokenizer``, ``lock``, ...) or :class:`prefixplan.warming.run.WarmOptions`
    fields (``timeout``, ``retries``, ``via``, ...).
    """
    from dataclasses import fields

    from prefixplan.warming.results import WarmOptions
    from prefixplan.warming.service import WarmRequest
    from prefixplan.warming.service import warm as run_warm

    run_fields = {f.name for f in fields(WarmOptions)}
    run_opts = WarmOptions(**{k: v for k, v in options.items() if k in run_fields})
    req = WarmRequest(
        endpoints=tuple(endpoints),
        endpoints_file=os.fspath(endpoints_file) if endpoints_file else None,
        analysis=os.fspath(analysis) if analysis else None,
        recipes=os.fspath(recipes) if recipes else None,
        top=top,
        keys=tuple(keys),
        dry_run=dry_run,
        db=db,
        options=run_opts,
        **{k: v for k, v in options.items() if k not in run_fields},
    )
    return run_warm(req)
