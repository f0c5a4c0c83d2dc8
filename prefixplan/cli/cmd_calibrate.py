"""``prefixplan calibrate``: fit the prefill-time model of one endpoint from measured TTFTs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand


def register(app: typer.Typer) -> None:
    app.command("calibrate", cls=PlainCommand)(calibrate)


def calibrate(
    endpoint: Annotated[
        str, typer.Option("--endpoint", metavar="URL", help="Server (replica) URL; warm and status take several.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="FILE", help=o.OUT_HELP)] = Path("prefill-profile.yaml"),
    engine: o.Engine = "auto",
    model: o.Model = None,
    api_key_env: o.ApiKeyEnv = None,
    lengths: Annotated[
        str, typer.Option("--lengths", metavar="N[,N...]", help="Prompt lengths in tokens, comma-separated.")
    ] = "256,512,1024,2048",
    fractions: Annotated[
        str, typer.Option("--fractions", metavar="F[,F...]", help="Cached fractions, comma-separated, each in [0,1).")
    ] = "0,0.5,0.9",
    repeats: Annotated[int, typer.Option("--repeats", metavar="N", help="Repeats of each (length, fraction).")] = 2,
    timeout: o.Timeout = 60.0,
    json_out: o.Json = None,
    name: Annotated[
        Optional[str],
        typer.Option(
            "--name",
            metavar="NAME",
            help="Store the profile under NAME (default <model>@<host>-<port>); simulate --profile NAME finds it.",
        ),
    ] = None,
    store: o.Store = True,
    db: o.Db = None,
) -> None:
    """Measure cold and warm TTFT over prompt lengths and cached fractions; fit a + b*new + c*new*(cached+new/2)."""
    from prefixplan.errors import UsageError
    from prefixplan.warming.calibrate import calibrate_endpoint, default_profile_name

    try:
        lens = [int(x) for x in lengths.split(",") if x.strip()]
        fracs = [float(x) for x in fractions.split(",") if x.strip()]
    except ValueError:
        raise UsageError("--lengths takes integers and --fractions numbers, comma-separated") from None
    profile, path = calibrate_endpoint(
        endpoint,
        engine=engine,
        api_key_env=api_key_env,
        model=model,
        lengths=lens,
        fractions=fracs,
        repeats=repeats,
        timeout=timeout,
        out=out,
        name=name,
        store=store,
        db=str(db) if db else None,
    )
    stored = (name or default_profile_name(profile)) if store else None
    data = dict(profile.to_dict(), stored_as=stored)
    if json_out is not None:
        from prefixplan.core.fileio import atomic_write_text

        atomic_write_text(json_out, json.dumps(data, indent=2) + "\n")
    if json_out != "-":
        from rich.console import Console

        con = Console(highlight=False, soft_wrap=True, markup=False)
        f = profile.fit
        con.print(
            f"{profile.endpoint}: {profile.engine} {profile.model} block {profile.block_size}, {f.n_samples} samples"
        )
        con.print(f"  a = {f.a_s * 1000:.3f} ms ± {f.stderr[0] * 1000:.3f}")
        con.print(f"  b = {f.b_s_per_token * 1e6:.4f} µs/token ± {f.stderr[1] * 1e6:.4f}")
        con.print(
            f"  c = {f.c_s_per_token2 * 1e9:.5f} ns/token² ± {f.stderr[2] * 1e9:.5f}"
            + ("" if f.attention_measurable else "  (not measurable here)")
        )
        con.print(
            f"  rmse {f.rmse_s * 1000:.2f} ms, r² {f.r2:.3f}; profile written to {path}"
            + (f", stored as {stored} (--profile {stored})" if stored else "")
        )
