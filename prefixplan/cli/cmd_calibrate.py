"""``prefixplan calibrate``: fit the prefill-time model of one endpoint from measured TTFTs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand

if TYPE_CHECKING:
    from prefixplan.api import CalibrateOutcome

OneEndpoint = Annotated[
    str, typer.Option("--endpoint", metavar="URL", help="Server (replica) URL; warm and status take several.")
]
Out = Annotated[Path, typer.Option("--out", "-o", metavar="FILE", help=o.OUT_HELP)]
Lengths = Annotated[
    str, typer.Option("--lengths", metavar="N[,N...]", help="Prompt lengths in tokens, comma-separated.")
]
Fractions = Annotated[
    str, typer.Option("--fractions", metavar="F[,F...]", help="Cached fractions, comma-separated, each in [0,1).")
]
Repeats = Annotated[int, typer.Option("--repeats", metavar="N", help="Repeats of each (length, fraction).")]
Name = Annotated[
    Optional[str],
    typer.Option(
        "--name",
        metavar="NAME",
        help="Store the profile under NAME (default <model>@<host>-<port>); simulate --profile NAME finds it.",
    ),
]


def register(app: typer.Typer) -> None:
    app.command("calibrate", cls=PlainCommand)(calibrate)


def calibrate(
    endpoint: OneEndpoint,
    out: Out = Path("prefill-profile.yaml"),
    engine: o.Engine = "auto",
    model: o.Model = None,
    api_key_env: o.ApiKeyEnv = None,
    lengths: Lengths = "256,512,1024,2048",
    fractions: Fractions = "0,0.5,0.9",
    repeats: Repeats = 2,
    timeout: o.Timeout = 60.0,
    json_out: o.Json = None,
    name: Name = None,
    store: o.Store = True,
    db: o.Db = None,
) -> None:
    """Measure cold and warm TTFT over prompt lengths and cached fractions; fit a + b*new + c*new*(cached+new/2)."""
    from prefixplan.api import CalibrateRequest, run_calibrate
    from prefixplan.errors import UsageError

    try:
        lens = tuple(int(x) for x in lengths.split(",") if x.strip())
        fracs = tuple(float(x) for x in fractions.split(",") if x.strip())
    except ValueError:
        raise UsageError("--lengths takes integers and --fractions numbers, comma-separated") from None
    request = CalibrateRequest(
        endpoint,
        out=out,
        engine=engine,
        model=model,
        api_key_env=api_key_env,
        lengths=lens,
        fractions=fracs,
        repeats=repeats,
        timeout=timeout,
        name=name,
        store=store,
        db=str(db) if db else None,
    )
    outcome = run_calibrate(request)
    if json_out is not None:
        from prefixplan.cli.output import write_json

        write_json(json_out, outcome.to_dict(), ensure_ascii=True)
    if json_out != "-":
        _render(outcome)


def _render(outcome: CalibrateOutcome) -> None:
    from rich.console import Console

    profile, stored = outcome.profile, outcome.stored_as
    con = Console(highlight=False, soft_wrap=True, markup=False)
    f = profile.fit
    con.print(f"{profile.endpoint}: {profile.engine} {profile.model} block {profile.block_size}, {f.n_samples} samples")
    con.print(f"  a = {f.a_s * 1000:.3f} ms ± {f.stderr[0] * 1000:.3f}")
    con.print(f"  b = {f.b_s_per_token * 1e6:.4f} µs/token ± {f.stderr[1] * 1e6:.4f}")
    con.print(
        f"  c = {f.c_s_per_token2 * 1e9:.5f} ns/token² ± {f.stderr[2] * 1e9:.5f}"
        + ("" if f.attention_measurable else "  (not measurable here)")
    )
    con.print(
        f"  rmse {f.rmse_s * 1000:.2f} ms, r² {f.r2:.3f}; profile written to {outcome.path}"
        + (f", stored as {stored} (--profile {stored})" if stored else "")
    )
