"""Retrying engine requests: :func:`with_retries` calls again when an
:class:`~prefixplan.engines.base.EngineRequestError` says trying again may help (refused,
timed out, HTTP 5xx/429), with a bounded exponential backoff, and says how many attempts were
made when it gives up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from prefixplan.engines.base import EngineRequestError

T = TypeVar("T")


def with_retries(
    fn: Callable[[], T],
    *,
    retries: int = 2,
    backoff: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn``; retry retryable :class:`EngineRequestError` up to ``retries`` times.

    Waits ``backoff * 2**attempt`` seconds between attempts (0.5, 1, 2, ... by default).
    """
    attempt = 0
    while True:
        try:
            return fn()
        except EngineRequestError as err:
            if not err.retryable or attempt >= retries:
                if attempt:
                    err.reason = f"{err.reason} (after {attempt + 1} attempts)"
                    err.args = (f"{err.endpoint}: {err.reason}",)
                raise
            sleep(backoff * (2**attempt))
            attempt += 1
