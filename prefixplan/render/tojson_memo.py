"""Serialise each tool once per batch: a memo for the chat template's ``tojson`` filter.

Chat templates write every tool as JSON (``{{ tool | tojson }}``) on every conversation they
render: for a batch of conversations that share their tools, the same objects are serialised
again and again (about 5% of a whole analyze on agent logs with long tool lists). Within a
:func:`tojson_memo` scope the filter of a compiled template answers a repeated call on the
*same object* with the same arguments from a memo.

Why the answer is exact: the memo is keyed by object identity and holds the object, so an id
cannot be reused by another object while the scope lasts; templates run in Jinja's immutable
sandbox, which cannot change a dict or list; and the scope covers one batched
``apply_chat_template`` call, during which the caller changes nothing. The original filter
computes every first answer, so the text is what the template gives without the memo (tested).

The filter is found through transformers' compiled-template cache (``_compile_jinja_template``,
present from 4.45 to 5.x), or is that of :class:`~prefixplan.render.hf_template.ChatTemplate`;
where it is missing or has another shape the memo is simply not installed and rendering runs as
before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_MEMO: ContextVar[dict[Any, tuple[Any, str]] | None] = ContextVar("prefixplan_tojson_memo", default=None)
MEMO_LIMIT = 4096
"""Entries per scope; past it the memo starts over (a batch rarely has this many tool objects)."""


def _memoised(original: Callable[..., str]) -> Callable[..., str]:
    def tojson(x: Any, *args: Any, **kwargs: Any) -> str:
        memo = _MEMO.get()
        if memo is None or not isinstance(x, (dict, list)):
            return original(x, *args, **kwargs)
        try:
            key = (id(x), args, tuple(sorted(kwargs.items())))
            hit = memo.get(key)
        except TypeError:  # an unhashable argument (a list of separators): no memo
            return original(x, *args, **kwargs)
        if hit is not None and hit[0] is x:
            return hit[1]
        out = original(x, *args, **kwargs)
        if len(memo) >= MEMO_LIMIT:
            memo.clear()
        memo[key] = (x, out)  # holding x keeps its id from being reused in this scope
        return out

    tojson.__prefixplan_memo__ = True  # type: ignore[attr-defined]
    tojson.__wrapped__ = original  # type: ignore[attr-defined]
    return tojson


def install(template: str) -> bool:
    """Wrap the ``tojson`` filter of transformers' compiled ``template`` (module docstring);
    True when the memo is in place (already, or now)."""
    try:
        from transformers.utils import chat_template_utils
    except Exception:  # pragma: no cover - transformers is a dependency
        return False
    compile_template = getattr(chat_template_utils, "_compile_jinja_template", None)
    if compile_template is None:
        return False
    try:
        filters = compile_template(template).environment.filters
    except Exception:  # another shape of the internals, or a template that does not compile
        return False
    return install_filters(filters)


def install_filters(filters: Any) -> bool:
    """Wrap the ``tojson`` filter of a Jinja environment's ``filters``; True when in place."""
    original = filters.get("tojson") if hasattr(filters, "get") else None
    if original is None:
        return False
    if getattr(original, "__prefixplan_memo__", False):
        return True
    filters["tojson"] = _memoised(original)
    return True


@contextmanager
def tojson_memo() -> Iterator[None]:
    """A scope in which installed filters answer repeated calls from a memo."""
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)
