"""The commands that talk to the replicas, each one call of one request: ``prefixplan warm``
(:func:`run_warm`, and :func:`warm` with keyword arguments), ``prefixplan status``
(:func:`run_status`) and ``prefixplan calibrate`` (:func:`run_calibrate`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prefixplan.warming.results import WarmOptions
from prefixplan.warming.service import WarmOutcome, WarmRequest

if TYPE_CHECKING:
    from pathlib import Path

    from prefixplan.warming.calibrate import Profile
    from prefixplan.warming.results import ItemResult
    from prefixplan.warming.status import ReplicaStatus

__all__ = [
    "CalibrateOutcome",
    "CalibrateRequest",
    "StatusOutcome",
    "StatusRequest",
    "WarmOptions",
    "WarmOutcome",
    "WarmRequest",
    "run_calibrate",
    "run_status",
    "run_warm",
    "warm",
]


def run_warm(request: WarmRequest, progress: Callable[[ItemResult], None] | None = None) -> WarmOutcome:
    """The ``prefixplan warm`` command as one call (:class:`~prefixplan.warming.service.WarmRequest`):
    plan, warm every replica (``progress`` is told of each prefix done), verify, record; with
    ``every_s`` again until ``for_s``/``rounds``. ``outcome.exit_code`` is what the command exits with."""
    from prefixplan.warming.service import warm as warm_replicas

    return warm_replicas(request, progress=progress)


def warm(
    endpoints: Sequence[str] = (),
    *,
    top: int | None = None,
    analysis: str | os.PathLike[str] | None = None,
    recipes: str | os.PathLike[str] | None = None,
    keys: Sequence[str] = (),
    endpoints_file: str | os.PathLike[str] | None = None,
    dry_run: bool = False,
    db: str | None = None,
    **options: Any,
) -> WarmOutcome:
    """Send the top prefixes to every replica and verify each hit (``prefixplan warm``).

    ``options`` are :class:`prefixplan.warming.service.WarmRequest` fields (``budget_gb``,
    ``api_key_env``, ``tokenizer``, ``lock``, ...) or :class:`prefixplan.warming.run.WarmOptions`
    fields (``timeout``, ``retries``, ``via``, ...).
    """
    from dataclasses import fields

    run_fields = {f.name for f in fields(WarmOptions)}
    run_opts = WarmOptions(**{k: v for k, v in options.items() if k in run_fields})
    req = WarmRequest(
        endpoints=tuple(endpoints),
        endpoints_file=os.fspath(endpoints_file) if endpoints_file else None,
        analysis=os.fspath(analysis) if analysis else None,
        recipes=os.fspath(recipes) if recipes else None,
        top=top,
        keys=tuple(keys),
        dry_run=dry_run,
        db=db,
        options=run_opts,
        **{k: v for k, v in options.items() if k not in run_fields},
    )
    return run_warm(req)


@dataclass(frozen=True)
class StatusRequest:
    """What ``prefixplan status`` is asked: the replicas (URLs, or an endpoints file), how to
    reach them, the hit-rate ``target`` (0-1) and a measuring ``window`` (a duration such as
    ``30s``; None: counters since start only); ``key_stats`` also reads the per-key statistics
    gateways wrote to the store ``db`` (then no replica is needed)."""

    endpoints: tuple[str, ...] = ()
    endpoints_file: str | None = None
    engine: str = "auto"
    api_key_env: str | None = None
    window: str | None = None
    target: float = 0.7
    timeout: float = 10.0
    key_stats: bool = False
    db: str | None = None


@dataclass(frozen=True)
class StatusOutcome:
    """:func:`run_status`'s result: each replica's status (None: no replica was given, only the
    key statistics) and the key statistics (None: not asked for)."""

    target: float
    replicas: list[ReplicaStatus] | None = None
    keys: list[dict[str, Any]] | None = None

    @property
    def exit_code(self) -> int:
        """0 every replica at or above target (or without traffic); 1 below target; 4 a replica unreachable."""
        from prefixplan.errors import ExitCode

        rows = self.replicas or []
        if any(r.verdict == "unreachable" for r in rows):
            return ExitCode.ENDPOINT
        if any(r.verdict == "below-target" for r in rows):
            return ExitCode.FINDINGS
        return ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        """The replicas' JSON (``status --json``)."""
        return {"target": self.target, "replicas": [r.to_dict() for r in self.replicas or []]}


def run_status(request: StatusRequest) -> StatusOutcome:
    """The ``prefixplan status`` command as one call (:class:`StatusRequest`).

    Raises:
        UsageError: a target outside 0-1, a bad window, or no replica (without ``key_stats``).
    """
    from prefixplan.core.durations import parse_duration
    from prefixplan.errors import UsageError
    from prefixplan.warming.service import endpoints_for
    from prefixplan.warming.status import replica_status

    if not 0 <= request.target <= 1:
        raise UsageError("--target must be between 0 and 1")
    eps = endpoints_for(request.endpoints, request.endpoints_file, request.api_key_env)
    keys = None
    if request.key_stats:
        from prefixplan.gateway.stats import key_stats

        keys = key_stats(request.db)
        if not eps:
            return StatusOutcome(request.target, keys=keys)
    if not eps:
        raise UsageError("no endpoint given", hint="pass --endpoint URL or --endpoints FILE")
    rows = replica_status(
        eps,
        engine=request.engine,
        window_s=parse_duration(request.window) if request.window else 0.0,
        target=request.target,
        timeout=request.timeout,
        db=request.db,
    )
    return StatusOutcome(request.target, replicas=rows, keys=keys)


@dataclass(frozen=True)
class CalibrateRequest:
    """What ``prefixplan calibrate`` is asked: the endpoint to measure, the prompt ``lengths``
    (tokens) and cached ``fractions`` (None: the defaults), the profile YAML to write (``out``) and
    whether to store it (under ``name``; None: ``<model>@<host>-<port>``) in the store ``db``."""

    endpoint: str
    out: str | os.PathLike[str] | None = "prefill-profile.yaml"
    engine: str = "auto"
    model: str | None = None
    api_key_env: str | None = None
    lengths: tuple[int, ...] | None = None
    fractions: tuple[float, ...] | None = None
    repeats: int = 2
    timeout: float = 60.0
    name: str | None = None
    store: bool = True
    db: str | None = None


@dataclass(frozen=True)
class CalibrateOutcome:
    """:func:`run_calibrate`'s result: the fitted profile, where its YAML was written, and the
    name it was stored under (None: not stored)."""

    profile: Profile
    path: Path | None
    stored_as: str | None

    def to_dict(self) -> dict[str, Any]:
        """The profile's JSON (``calibrate --json``)."""
        return dict(self.profile.to_dict(), stored_as=self.stored_as)


def run_calibrate(request: CalibrateRequest) -> CalibrateOutcome:
    """The ``prefixplan calibrate`` command as one call (:class:`CalibrateRequest`): measure cold
    and warm TTFTs, fit ``a + b*new + c*new*(cached+new/2)``, write and store the profile."""
    from prefixplan.warming.calibrate import (
        DEFAULT_FRACTIONS,
        DEFAULT_LENGTHS,
        calibrate_endpoint,
        default_profile_name,
    )

    profile, path = calibrate_endpoint(
        request.endpoint,
        engine=request.engine,
        api_key_env=request.api_key_env,
        model=request.model,
        lengths=DEFAULT_LENGTHS if request.lengths is None else request.lengths,
        fractions=DEFAULT_FRACTIONS if request.fractions is None else request.fractions,
        repeats=request.repeats,
        timeout=request.timeout,
        out=os.fspath(request.out) if request.out is not None else None,
        name=request.name,
        store=request.store,
        db=request.db,
    )
    stored = (request.name or default_profile_name(profile)) if request.store else None
    return CalibrateOutcome(profile, path, stored)
