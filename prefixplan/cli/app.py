"""The ``prefixplan`` typer application.

Command modules are discovered (``prefixplan/cli/cmd_*.py``, each with ``register(app)``),
so adding a command adds a file. Heavy libraries (transformers, openai) are imported inside
command functions only, keeping ``prefixplan --help`` fast.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from typing import Any

import typer

from prefixplan.cli.errors import run_with_error_boundary
from prefixplan.cli.help import PlainGroup
from prefixplan.version import __version__


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"prefixplan {__version__}")
        raise typer.Exit(0)


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="prefixplan",
        help="Find, simulate, version, guard and warm shared prompt prefixes for vLLM and SGLang.",
        no_args_is_help=True,
        pretty_exceptions_show_locals=False,
        add_completion=True,
        rich_markup_mode="rich",
        cls=PlainGroup,
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", callback=_version_callback, is_eager=True, metavar="", help="Print the version."
        ),
    ) -> None:
        """prefixplan: make prefix (KV) caching pay off."""

    import prefixplan.cli as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("cmd_"):
            module = importlib.import_module(f"prefixplan.cli.{info.name}")
            module.register(app)
    return app


def build_command() -> Any:
    """The click command tree of :func:`build_app` (help adjusted by :mod:`prefixplan.cli.help`)."""
    return typer.main.get_command(build_app())


def main(argv: list[str] | None = None) -> int:
    """Console entry point (``argv``: in place of the process's arguments, as tests call it)."""
    from prefixplan.core.memory import map_large_allocations

    map_large_allocations()  # this process is the command's: freed windows go back at once
    if argv is None:  # the process is the command's own: its tokenizers need no model framework
        from prefixplan.render.frameworks import hide_model_frameworks

        hide_model_frameworks()
    return run_with_error_boundary(build_command(), argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
