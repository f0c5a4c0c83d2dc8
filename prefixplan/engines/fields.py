"""Reading what an engine reports: the token-count fields of a usage report, accepted only as
plausible integers (anything else is a malformed answer, never evidence), and every form in which
a secret may come back from a server, so that adapters can redact it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def usage_cached_tokens(usage: Mapping[str, Any] | None) -> Any:
    """``usage.prompt_tokens_details.cached_tokens`` as reported (None when absent); checked by
    :meth:`~prefixplan.engines.base.EngineAdapter.completion`."""
    if not isinstance(usage, Mapping):
        return None
    details = usage.get("prompt_tokens_details")
    if isinstance(details, Mapping) and details.get("cached_tokens") is not None:
        return details["cached_tokens"]
    return None


MAX_COUNT = 2**31 - 1


def plausible_count(value: Any, field_name: str) -> int:
    """A token count a server reported, as an int in [0, 2**31); anything else (a float, a string,
    10**400, a negative number) is a malformed answer, never evidence."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        shown = str(value)
        shown = shown if len(shown) <= 24 else shown[:12] + "..." + f"({len(shown)} digits)"
        raise ValueError(f"implausible {field_name} {shown} in the usage report")
    return value


def optional_count(value: Any, field_name: str) -> int | None:
    """:func:`plausible_count` of a field that may be absent (None)."""
    return None if value is None else plausible_count(value, field_name)


def secret_forms(secret: str | None) -> tuple[str, ...]:
    """Every form in which ``secret`` may come back from a server: itself and base64 of it (and
    of ``:secret`` / ``secret:``, the Basic-auth shapes); longest first so replacements nest."""
    if not secret:
        return ()
    import base64

    forms = {secret}
    for raw in (secret, f":{secret}", f"{secret}:"):
        for enc in (base64.b64encode, base64.urlsafe_b64encode):
            text = enc(raw.encode()).decode()
            forms.update({text, text.rstrip("=")})
    return tuple(sorted((f for f in forms if len(f) >= 4), key=len, reverse=True))


def redact_forms(text: str, forms: tuple[str, ...]) -> str:
    """``text`` with every form of :func:`secret_forms` replaced by ``***``."""
    for form in forms:
        if form in text:
            text = text.replace(form, "***")
    return text
