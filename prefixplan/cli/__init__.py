"""Command-line interface: typer commands that parse options, call one library function
and render the result. Each command lives in its own ``cmd_*.py`` module exposing
``register(app)``; :mod:`prefixplan.cli.app` discovers them."""
