"""The one entry point the ``warm`` command calls: load sources, plan, run (once or every N s), record."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefixplan.errors import ExitCode, UsageError
from prefixplan.savings.prefill import PrefillProfile
from prefixplan.warming.plan import WarmPlan, WarmSource, plan_warm
from prefixplan.warming.records import record_report
from prefixplan.warming.results import ItemResult, WarmOptions, WarmReport
from prefixplan.warming.run import run_warm

DEFAULT_TOP = 20


@dataclass(frozen=True, slots=True)
class WarmRequest:
    """Everything ``prefixplan warm`` was asked to do (no secrets: only the env var's name)."""

    endpoints: tuple[str, ...] = ()
    endpoints_file: str | None = None
    analysis: str | None = None
    top: int | None = None  # None: 20 of an analysis, every recipe
    keys: tuple[str, ...] = ()
    budget_gb: float | None = None
    kv_bytes_per_token: float | None = None
    model_config: str | None = None
    api_key_env: str | None = None
    options: WarmOptions = field(default_factory=WarmOptions)
    dry_run: bool = False
    every_s: float | None = None
    for_s: float | None = None
    rounds: int | None = None
    record: bool = True
    db: str | None = None
    profile: str | None = None
    recipes: str | None = None  # a recipes folder or file: warm its prefixes (rendered) instead of an analysis
    tokenizer: str | None = None  # renders recipes (default: each recipe's, else vllm:<first endpoint>)
    lock: str | None = None  # lock file checked against recipes (default ./prefixplan.lock when present)


@dataclass(frozen=True, slots=True)
class WarmOutcome:
    plan: WarmPlan
    reports: tuple[WarmReport, ...] = ()
    profile: PrefillProfile | None = None

    @property
    def exit_code(self) -> int:
        return self.reports[-1].exit_code if self.reports else ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        if not self.reports:
            return {"dry_run": True, "plan": self.plan.to_dict(self.profile)}
        last = self.reports[-1].to_dict()
        if len(self.reports) > 1:
            last["rounds"] = [
                {"status": r.status, "exit_code": r.exit_code, "duration_s": round(r.duration_s, 3)}
                for r in self.reports
            ]
        return last


def build_source(req: WarmRequest) -> WarmSource:
    """Where ``req``'s candidates come from: recipes, an analysis file, registered keys, or the
    store's newest analysis."""
    from prefixplan.analysis.record_io import load_record
    from prefixplan.warming.source import latest_source, source_from_record, source_from_store_keys, store_token_lookup

    if req.recipes:
        if req.analysis:
            raise UsageError("--recipes and --analysis exclude each other")
        return recipes_source(req)
    if req.analysis:
        return source_from_record(load_record(req.analysis), store_token_lookup(req.db))
    if req.keys:
        try:
            source = latest_source(req.db)
        except UsageError:
            return source_from_store_keys(req.keys, req.db)
        names = {c.key for c in source.candidates}
        return source if all(k in names for k in req.keys) else source_from_store_keys(req.keys, req.db)
    return latest_source(req.db)


def build_plan(req: WarmRequest) -> WarmPlan:
    """The plan for ``req`` (no network, except rendering recipes through a server's ``/tokenize``)."""
    source = build_source(req)
    kv = req.kv_bytes_per_token
    if kv is None and req.model_config:
        from prefixplan.savings.kvsize import load_config

        kv = load_config(req.model_config).bytes_per_token
    top = req.top
    if not req.recipes and top is None:
        top = DEFAULT_TOP
    return plan_warm(
        source,
        top=None if req.keys else top,
        keys=list(req.keys) or None,
        budget_gb=req.budget_gb,
        kv_bytes_per_token=kv,
        block_size=req.options.block_size,
    )


def recipes_source(req: WarmRequest) -> WarmSource:
    """The rendered recipes of ``req.recipes`` (no warming)."""
    from prefixplan.keys.recipes import load_recipes
    from prefixplan.warming.recipes import load_lock_if_present, source_from_recipes
    from prefixplan.warming.source import endpoints_from_options

    assert req.recipes is not None
    recipes = load_recipes(req.recipes)
    endpoints = endpoints_from_options(req.endpoints, req.endpoints_file, req.api_key_env)
    return source_from_recipes(
        recipes,
        tokenizer=req.tokenizer,
        endpoint=endpoints[0] if endpoints else None,
        model=req.options.model,
        keys=list(req.keys) or None,
        lock=load_lock_if_present(req.lock),
    )


def warm(
    req: WarmRequest,
    *,
    progress: Callable[[ItemResult], None] | None = None,
    on_round: Callable[[int, WarmReport], None] | None = None,
    stop: threading.Event | None = None,
    connector: Any = None,
) -> WarmOutcome:
    """Plan, then (unless ``dry_run``) warm every endpoint, record each result in the store,
    and with ``every_s`` repeat until ``for_s``/``rounds``/SIGTERM.
    """
    from prefixplan.store import resolve_profile
    from prefixplan.warming.keepalive import keepalive
    from prefixplan.warming.source import endpoints_from_options

    profile = resolve_profile(req.profile, req.db) if req.profile else None
    endpoints = endpoints_from_options(req.endpoints, req.endpoints_file, req.api_key_env)  # validated first
    plan = build_plan(req)
    if req.dry_run:
        return WarmOutcome(plan=plan, profile=profile)
    if not endpoints:
        raise UsageError("no endpoint given", hint="pass --endpoint URL (repeatable) or --endpoints FILE")

    stop = stop or threading.Event()

    def one(_: int) -> WarmReport:
        report = run_warm(plan, endpoints, req.options, connector=connector, progress=progress, stop=stop)
        if req.record:
            record_report(report, req.db)
        return report

    if req.every_s is None:
        return WarmOutcome(plan=plan, reports=(one(0),), profile=profile)
    if req.for_s is None and req.rounds is None:
        raise UsageError("--every needs a bound: --for DURATION or --rounds N")
    reports = keepalive(one, req.every_s, max_duration_s=req.for_s, max_rounds=req.rounds, stop=stop, on_round=on_round)
    return WarmOutcome(plan=plan, reports=tuple(reports), profile=profile)


def endpoints_for(urls: Sequence[str], file: str | None, api_key_env: str | None) -> list[Any]:
    from prefixplan.warming.source import endpoints_from_options

    return endpoints_from_options(urls, file, api_key_env)
