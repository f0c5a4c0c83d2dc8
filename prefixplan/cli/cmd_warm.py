"""``prefixplan warm``: put the most valuable prefixes into every replica's KV cache and prove it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from prefixplan.cli import options as o

if TYPE_CHECKING:
    from prefixplan.api import WarmRequest

DEFAULT_RECIPES = "recipes"

Keys = Annotated[
    Optional[str],
    typer.Option("--keys", metavar="KEY[,KEY...]", help="Comma-separated name@vN keys instead of --top."),
]
RecipesPath = Annotated[Optional[str], o.RECIPES_OPTION]
LockFile = Annotated[Optional[Path], o.LOCK_OPTION]
Via = Annotated[
    str,
    typer.Option(
        "--via", metavar="MODE", help="auto, ids (exact token ids) or chat (the request, rendered by the server)."
    ),
]
Budget = Annotated[
    Optional[float],
    typer.Option(
        "--budget",
        metavar="GB",
        help="KV memory budget in GB: warm the set that maximises reused tokens within it.",
    ),
]
KvBytesPerToken = Annotated[
    Optional[float], typer.Option("--kv-bytes-per-token", metavar="N", help="KV bytes per token (for --budget).")
]
Concurrency = Annotated[int, typer.Option("--concurrency", metavar="N", help="Replicas warmed in parallel.")]
Retries = Annotated[int, typer.Option("--retries", metavar="N", help="Retries per request on refused/timeout/5xx.")]
Priority = Annotated[
    Optional[int],
    typer.Option("--priority", metavar="N", help="SGLang request priority (--radix-eviction-policy priority)."),
]
Every = Annotated[
    Optional[str],
    typer.Option("--every", metavar="DURATION", help="Re-warm every DURATION (e.g. 60s); needs --for or --rounds."),
]
For = Annotated[Optional[str], typer.Option("--for", metavar="DURATION", help="Total keepalive time (e.g. 1h).")]
Rounds = Annotated[Optional[int], typer.Option("--rounds", metavar="N", help="Number of keepalive rounds.")]
DryRun = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        metavar="",
        help="Print the plan (prefixes, tokens, order, estimated prefill) and send nothing.",
    ),
]
ShowProgress = Annotated[
    bool, typer.Option("--progress/--no-progress", metavar="", help="Show a progress bar on a terminal.")
]


def _command_class() -> type:
    """``--recipes`` takes an optional folder: given without a value it means ``recipes``."""
    from prefixplan.cli.help import PlainCommand

    class WarmCommand(PlainCommand):
        def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
            args = list(args)
            for i, arg in enumerate(args):
                if arg == "--":
                    break
                if arg == "--recipes" and (i + 1 == len(args) or args[i + 1].startswith("-")):
                    args.insert(i + 1, DEFAULT_RECIPES)
            return super().parse_args(ctx, args)

    return WarmCommand


def register(app: typer.Typer) -> None:
    app.command("warm", cls=_command_class())(warm)


def warm(
    endpoint: o.Endpoint = None,
    endpoints_file: o.EndpointsFile = None,
    analysis: o.Analysis = None,
    top: o.Top = None,
    keys: Keys = None,
    recipes: RecipesPath = None,
    tokenizer: o.Tokenizer = None,
    lock_file: LockFile = None,
    via: Via = "auto",
    budget: Budget = None,
    kv_bytes_per_token: KvBytesPerToken = None,
    model_config: o.ModelConfig = None,
    engine: o.Engine = "auto",
    model: o.Model = None,
    block_size: o.BlockSize = None,
    api_key_env: o.ApiKeyEnv = None,
    concurrency: Concurrency = 8,
    timeout: o.Timeout = 30.0,
    retries: Retries = 2,
    priority: Priority = None,
    every: Every = None,
    for_: For = None,
    rounds: Rounds = None,
    dry_run: DryRun = False,
    profile: o.Profile = None,
    json_out: o.Json = None,
    store: o.Store = True,
    db: o.Db = None,
    progress: ShowProgress = True,
) -> None:
    """Warm the top-N prefixes on every replica, verify them with the engine, record the result.

    Exit codes: 0 every prefix ready on every replica; 1 partial (some replica did not verify);
    2 bad options; 4 no replica usable (unreachable, tokenizer mismatch).
    """
    from prefixplan.api import WarmOptions, WarmRequest
    from prefixplan.core.durations import parse_duration

    options = WarmOptions(
        engine=engine,
        concurrency=concurrency,
        timeout=timeout,
        retries=retries,
        model=model,
        block_size=block_size,
        priority=priority,
        via=via,
    )
    req = WarmRequest(
        endpoints=tuple(endpoint or ()),
        endpoints_file=str(endpoints_file) if endpoints_file else None,
        analysis=str(analysis) if analysis else None,
        top=top,
        keys=tuple(k.strip() for k in keys.split(",") if k.strip()) if keys else (),
        budget_gb=budget,
        kv_bytes_per_token=kv_bytes_per_token,
        model_config=str(model_config) if model_config else None,
        api_key_env=api_key_env,
        options=options,
        recipes=recipes,
        tokenizer=tokenizer,
        lock=str(lock_file) if lock_file else None,
        dry_run=dry_run,
        every_s=parse_duration(every) if every else None,
        for_s=parse_duration(for_) if for_ else None,
        rounds=rounds,
        record=store,
        db=str(db) if db else None,
        profile=profile,
    )
    _warm(req, json_out, progress)


def _warm(req: WarmRequest, json_out: str | None, progress: bool) -> None:
    """Run ``req`` (with a progress bar on a terminal), write its JSON, render it, exit with its code."""
    from rich.console import Console

    from prefixplan.api import run_warm
    from prefixplan.cli.output import write_json

    con = Console(stderr=json_out == "-", highlight=False, soft_wrap=True)
    bar = None
    if progress and con.is_terminal and not req.dry_run:
        from rich.progress import Progress

        bar = Progress(console=con, transient=True)
    if bar is not None:
        with bar:
            task = bar.add_task("warming", total=None)
            outcome = run_warm(req, progress=lambda r: bar.advance(task))
    else:
        outcome = run_warm(req)
    data = outcome.to_dict()
    if json_out is not None:
        write_json(json_out, data)
    if json_out != "-":
        from prefixplan.report.console_warm import render_warm

        render_warm(con, data)
    raise typer.Exit(outcome.exit_code)
