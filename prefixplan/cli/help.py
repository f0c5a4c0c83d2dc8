"""Help that reads like a person wrote it, through typer's ``cls`` hook and click's overridable
methods: no type column for arguments (``<list[str]>``) or for ``--help`` (``<bool>``), no value
shown for flags; metavars (``LOG...``, ``FILE``, ``N``) say what to pass.

Every command is registered with :class:`PlainCommand` (``app.command(name, cls=PlainCommand)``)
and every group built with :class:`PlainGroup`; nothing is patched after typer built them.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup


def _plain(params: list[Any]) -> list[Any]:
    for param in params:
        if isinstance(param, TyperArgument):
            setattr(param, "display_type_rich", _no_type)  # noqa: B010 (the metavar LOG... says it: no "<list[str]>")
        elif getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""  # a flag takes no value: show none
    return params


def _no_type(ctx: Any) -> None:
    return None


class _Plain:
    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""
        return option

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain(super().get_params(ctx))  # type: ignore[misc]


class PlainCommand(_Plain, TyperCommand):
    """A command whose help shows metavars, not types."""


class PlainGroup(_Plain, TyperGroup):
    """A group whose help shows metavars, not types."""
