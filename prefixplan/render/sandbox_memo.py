"""Attribute access in a chat template's Jinja sandbox, without the repeated work.

transformers compiles a chat template in Jinja's ``ImmutableSandboxedEnvironment``. Every
``x.name`` in the template calls the environment's ``getattr``, which tries Python's
``getattr`` first and, when that fails, the item ``x["name"]``; a found attribute is then
checked by ``is_safe_attribute``. In a chat template nearly every access is ``message.role``
or ``message.content`` on a plain dict (a raised and caught ``AttributeError`` before the item
lookup) or a string method (a safety check that walks a table of types). About a third of
the template time on agent logs.

:func:`install` sets two instance attributes on the compiled template's environment
(:func:`install_environment`: on an environment of prefixplan's own,
:class:`~prefixplan.render.hf_template.ChatTemplate`'s):

- ``getattr``: for an exact ``dict`` and a string name that is not an attribute of ``dict``
  (``dir(dict)``: a dict instance has no attributes of its own), Python's ``getattr`` would
  raise ``AttributeError``, so the sandbox's answer is the item or, if missing, its undefined
  value; this answers that directly. Everything else goes to the sandbox's own method.
- ``is_safe_attribute``: for objects of exact built-in types (dict, list, tuple, str, int,
  float, bool, None) and of Jinja's loop and namespace objects (``loop.index0``,
  ``ns.flag``: the other half of the accesses), the sandbox's decision depends only on the
  type and the name: its checks are ``isinstance`` tests on the object against fixed types
  and tests of the name, and the value is not read. An ``isinstance`` answer is the type's
  unless the object reports another ``__class__``; no class of these types defines one
  (checked per type). So each (type, name) is decided once by the sandbox's own method and
  remembered. Other objects are decided every time, as before.

So the template sees the same values and is refused the same attributes (tested, unsafe
accesses included); nothing is decided that the sandbox did not decide itself. Installed only
where the environment's methods are Jinja's own (a subclass that overrides them is left alone).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PLAIN_TYPES = frozenset({dict, list, tuple, str, int, float, bool, type(None)})
"""Types whose attribute safety is decided once per (type, name)."""
_DICT_NAMES = frozenset(dir(dict))
_MARK = "__prefixplan_sandbox_memo__"


def _environment(template: str) -> Any | None:
    """The sandboxed environment of transformers' compiled ``template``, or None."""
    try:
        from transformers.utils import chat_template_utils
    except Exception:  # pragma: no cover - both are dependencies
        return None
    compile_template = getattr(chat_template_utils, "_compile_jinja_template", None)
    if compile_template is None:
        return None
    try:
        env = compile_template(template).environment
    except Exception:  # a template that does not compile: rendering reports it
        return None
    return env if _jinja_own(env) else None


def _jinja_own(env: Any) -> bool:
    """Whether ``env`` is an immutable sandbox whose two methods are Jinja's own."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

    kind = type(env)
    return isinstance(env, ImmutableSandboxedEnvironment) and (
        kind.getattr is SandboxedEnvironment.getattr
        and kind.is_safe_attribute is ImmutableSandboxedEnvironment.is_safe_attribute
    )


def _getattr(env: Any) -> Callable[[Any, Any], Any]:
    sandbox_getattr = type(env).getattr

    def getattr_(obj: Any, attribute: Any) -> Any:
        if type(obj) is dict and type(attribute) is str and attribute not in _DICT_NAMES:
            try:
                return obj[attribute]
            except KeyError:
                return env.undefined(obj=obj, name=attribute)
        return sandbox_getattr(env, obj, attribute)

    return getattr_


def _by_type(kind: type) -> bool:
    """Whether the sandbox's safety decision for objects of ``kind`` is one per name."""
    from jinja2.runtime import LoopContext
    from jinja2.utils import Namespace

    if kind not in PLAIN_TYPES and not issubclass(kind, (LoopContext, Namespace)):
        return False
    return not any("__class__" in vars(c) for c in kind.__mro__ if c is not object)


def _is_safe_attribute(env: Any) -> Callable[[Any, str, Any], bool]:
    decide = type(env).is_safe_attribute
    decided: dict[tuple[type, str], bool] = {}
    by_type: dict[type, bool] = {}

    def is_safe_attribute(obj: Any, attr: str, value: Any) -> bool:
        kind = type(obj)
        eligible = by_type.get(kind)
        if eligible is None:
            eligible = by_type[kind] = _by_type(kind)
        if not eligible or type(attr) is not str:
            return bool(decide(env, obj, attr, value))
        key = (kind, attr)
        ok = decided.get(key)
        if ok is None:
            ok = decided[key] = bool(decide(env, obj, attr, value))
        return ok

    return is_safe_attribute


def install(template: str) -> bool:
    """Put the two shortcuts (module docstring) on the environment of the compiled
    ``template``; True when they are in place (already, or now)."""
    env = _environment(template)
    return env is not None and install_environment(env)


def install_environment(env: Any) -> bool:
    """Put the two shortcuts on a sandboxed environment (one whose methods are Jinja's own)."""
    if not _jinja_own(env):
        return False
    if not env.__dict__.get(_MARK):
        env.getattr = _getattr(env)
        env.is_safe_attribute = _is_safe_attribute(env)
        env.__dict__[_MARK] = True
    return True


def remove(template: str) -> None:
    """Take the shortcuts off the compiled ``template``'s environment (tests compare both)."""
    env = _environment(template)
    if env is not None and env.__dict__.pop(_MARK, False):
        del env.getattr, env.is_safe_attribute
