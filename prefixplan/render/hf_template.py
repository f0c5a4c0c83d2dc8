"""A chat template rendered the way transformers renders it, without importing transformers.

``apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)`` does,
for conversations of plain JSON values (what a log holds):

1. picks the template: a single one, or from named templates ``tool_use`` when tools are
   given and it exists, else ``default``;
2. (transformers 5, at least 5.25) drops the keys of each message whose value is ``None``;
3. (transformers 5, at least 5.25) gives a message with reasoning (``reasoning_content``,
   ``thinking`` or ``reasoning``, the first one set) the same text under ``thinking`` (first)
   and ``reasoning_content`` (last);
4. (transformers 5) copies every input into plain JSON types, a copy equal to the input;
5. renders the template compiled in Jinja's immutable sandbox (``trim_blocks``,
   ``lstrip_blocks``, loop controls, a ``{% generation %}`` block that renders its body) with
   ``tojson`` as ``json.dumps`` (no ASCII escaping; ``indent``, ``separators``, ``sort_keys``),
   ``raise_exception`` and ``strftime_now`` (transformers 5 also: a ``dict`` constructor and a
   ``namespace`` that refuses names starting with ``_``); the variables are ``messages``,
   ``tools``, ``documents`` (None), ``add_generation_prompt`` and the tokenizer's special tokens
   (``bos_token`` ...) overridden by the caller's template arguments.

Versions differ in steps 2 and 3, so :class:`Semantics` says which a renderer does; the variant
that agrees with the installed transformers is found when a folder's snapshot is made
(:mod:`prefixplan.render.hf_snapshot`: probe conversations rendered both ways, the installed
major version's own behaviour tried first). Only requests made of plain JSON values
(:func:`plain`) are rendered here; anything else goes to transformers itself. Tests compare the
two on generated conversations for every tokenizer family the project ships, with transformers
5 and with the lowest supported 4.x.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_SCALARS = frozenset({str, int, float, bool, type(None)})


@dataclass(frozen=True, slots=True)
class Semantics:
    """What a transformers version does to messages and offers the template (module docstring)."""

    drop_none: bool = True  # step 2
    alias_reasoning: bool = True  # step 3
    hardened_helpers: bool = True  # the dict and namespace helpers of transformers 5


def transformers_major() -> int | None:
    """The installed transformers' major version, from its package metadata (not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("transformers")
    except PackageNotFoundError:
        return None
    major = found.split(".", 1)[0]
    return int(major) if major.isdigit() else None


def semantics_available() -> bool:
    """Whether the installed transformers is a version this module can render for (4 or 5)."""
    return transformers_major() in (4, 5)


def variants() -> list[Semantics]:
    """The semantics to try, the installed major version's own behaviour first."""
    helpers = transformers_major() != 4
    order = [(True, True), (True, False), (False, True), (False, False)]
    if not helpers:
        order.reverse()
    return [Semantics(drop, alias, helpers) for drop, alias in order]


def plain(value: Any) -> bool:
    """Whether ``value`` is made only of JSON types (dict, list, tuple, str, int, float, bool,
    None; exact types, not subclasses), which transformers' copy leaves equal."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is dict:
        return all(type(k) in _SCALARS and plain(v) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(plain(v) for v in value)
    return False


def template_message(message: dict[str, Any], semantics: Semantics = Semantics()) -> dict[str, Any]:
    """A message as the template sees it (steps 2 and 3 of the module docstring)."""
    if semantics.drop_none and any(v is None for v in message.values()):
        message = {k: v for k, v in message.items() if v is not None}
    if semantics.alias_reasoning:
        reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


def _environment(hardened_helpers: bool) -> Any:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import Namespace

    class Generation(Extension):
        """``{% generation %}...{% endgeneration %}``: renders its body (no assistant mask)."""

        tags = {"generation"}  # noqa: RUF012 - Jinja reads the class attribute

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    def check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}."
            )

    class TemplateNamespace(Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                check_name(name)
            Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            check_name(name)
            Namespace.__setitem__(self, name, value)

    def raise_exception(message: Any) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, "jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    if hardened_helpers:
        env.globals["dict"] = TemplateDict()
        env.globals["namespace"] = TemplateNamespace
    return env


class ChatTemplate:
    """A tokenizer's chat template(s), compiled once, rendered as the module docstring says."""

    def __init__(
        self, template: str | Mapping[str, str], variables: Mapping[str, Any], semantics: Semantics = Semantics()
    ) -> None:
        if not plain(dict(variables)):
            raise ValueError("template variables must be plain JSON values")
        self.variables = dict(variables)
        self.semantics = semantics
        self.environment = _environment(semantics.hardened_helpers)
        self._source = template
        self._compiled: dict[str, Any] = {}

    def compiled(self, has_tools: bool) -> Any:
        """The compiled template a request with (or without) tools is rendered with."""
        source = self._source
        if isinstance(source, Mapping):
            if has_tools and "tool_use" in source:
                source = source["tool_use"]
            elif "default" in source:
                source = source["default"]
            else:
                raise ValueError(
                    "This model has multiple chat templates with no default specified; "
                    f"template names: {sorted(source)}"
                )
        found = self._compiled.get(source)
        if found is None:
            found = self._compiled[source] = self.environment.from_string(source)
        return found

    def render(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        """The text of one conversation (``tools``: None when the request has none)."""
        return self.render_many([messages], tools)[0]

    def render_many(self, conversations: Sequence[Sequence[dict[str, Any]]], tools: list[Any] | None) -> list[str]:
        """The texts of conversations that share their tools, each as a call of its own gives."""
        compiled = self.compiled(tools is not None)
        out = []
        for messages in conversations:
            if not messages:
                raise ValueError("Cannot apply chat template to an empty conversation.")
            chat = [template_message(m, self.semantics) for m in messages]
            out.append(
                compiled.render(
                    messages=chat, tools=tools, documents=None, add_generation_prompt=True, **self.variables
                )
            )
        return out
