"""``prefixplan calibrate``: fit the prefill-time model of one endpoint from measured TTFTs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)


def calibrate(
    endpoint: Annotated[str, typer.Option("--endpoint", help="Server URL.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Profile YAML to write (use it with --profile).")] = Path(
        "prefill-profile.yaml"
    ),
    engine: Annotated[str, typer.Option("--engine", help="auto, vllm, sglang or openai-compatible.")] = "auto",
    model: Annotated[Optional[str], typer.Option("--model", help="Served model name.")] = None,
    api_key_env: Annotated[
        Optional[str], typer.Option("--api-key-env", help="Name of the env var holding the API key.")
    ] = None,
    lengths: Annotated[
        str, typer.Option("--lengths", help="Prompt lengths in tokens, comma-separated.")
    ] = "256,512,1024,2048",
    fractions: Annotated[
        str, typer.Option("--fractions", help="Cached fractions, comma-separated, each in [0,1).")
    ] = "0,0.5,0.9",
    repeats: Annotated[int, typer.Option("--repeats", help="Repeats of each (length, fraction).")] = 2,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds per request.")] = 60.0,
    json_out: Annotated[
        Optional[str], typer.Option("--json", help="Write the profile as JSON to FILE ('-' = stdout).")
    ] = None,
    name: Annotated[
        Optional[str],
        typer.Option(
            "--name",
            help="Store the profile under NAME (default <model>@<host>-<port>); simulate --profile NAME finds it.",
        ),
    ] = None,
    store: Annotated[bool, typer.Option("--store/--no-store", help="Also save the profile in the store.")] = True,
    db: Annotated[
        Optional[Path], typer.Option("--db", help="Store path (default $PREFIXPLAN_DB or ./prefixplan.db).")
    ] = None,
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
