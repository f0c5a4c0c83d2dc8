"""Two-phase readiness: a newly registered key version is served at once and warmed on every
replica in the background; it becomes *ready* (routable by affinity) only when every replica
verified it, and a failure leaves it *partial*, announced nowhere.

Warming reuses ``prefixplan warm``: the version's parts become a recipe, rendered with the first
replica's ``/tokenize`` (or ``--tokenizer``) and cut where the user's message starts
(:func:`prefixplan.warming.recipes.source_from_recipes`), then :func:`prefixplan.warming.run.run_warm`
sends the exact ids to every replica and verifies ``cached_tokens`` with a probe. Warm runs are
recorded in the store like any other (``warm_runs``).

:class:`ReadyView` keeps the router's ready sets in step with the backend, so a key another
gateway warmed is routed by affinity here too (re-read at most every ``refresh_s`` seconds).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from prefixplan.engines.endpoint import Endpoint
from prefixplan.errors import PrefixplanError
from prefixplan.gateway.rules import state_call
from prefixplan.gateway.state import Backend, KeyVersion, fleet_status
from prefixplan.keys.recipe_model import Part, Recipe
from prefixplan.routing.policies import Router
from prefixplan.store.gateway_tables import FLEET
from prefixplan.warming.results import WarmOptions

log = logging.getLogger("prefixplan.gateway")


def version_recipe(kv: KeyVersion) -> Recipe:
    """The version's parts as a recipe (what ``warm --recipes`` renders).

    Raises:
        PrefixplanError: a part the recipe form cannot express (developer messages).
    """
    parts = []
    for i, p in enumerate(kv.parts):
        if p.kind not in ("system", "tool", "document"):
            raise PrefixplanError(f"{kv.key}: {p.kind} messages cannot be warmed (only system, tools, documents)")
        data = p.data.encode("utf-8", "surrogatepass")
        if p.kind == "system" and p.is_json:
            raise PrefixplanError(f"{kv.key}: a system message with a list content cannot be warmed")
        parts.append(Part(kind=p.kind, label=f"{p.kind}[{i}]", source="gateway", data=data))
    return Recipe(
        name=kv.name,
        version=kv.version,
        retain=kv.retain_seconds,
        pin=False,
        model=None,
        tokenizer=None,
        render=kv.render,
        parts=tuple(parts),
        file=Path("gateway"),
        index=0,
    )


@dataclass(frozen=True)
class WarmOutcome:
    """What warming a version found: ``states`` (``{replica: status}`` plus ``*``), the exact
    prefix ids sent (None when rendering failed) and each replica's block size."""

    states: dict[str, str]
    prefix_ids: tuple[int, ...] | None = field(default=None, repr=False)
    block_sizes: dict[str, int] = field(default_factory=dict)


def warm_version(
    kv: KeyVersion,
    endpoints: Sequence[Endpoint],
    options: WarmOptions,
    *,
    tokenizer: str | None = None,
    db: str | None = None,
    record: bool = True,
) -> WarmOutcome:
    """Warm ``kv`` on every endpoint (blocking): states ``{replica label: verified|failed|...}``
    plus ``*`` -> ``ready`` | ``partial`` | ``failed``, the prefix ids and block sizes."""
    from prefixplan.warming.plan import plan_warm
    from prefixplan.warming.recipes import source_from_recipes
    from prefixplan.warming.records import record_report
    from prefixplan.warming.run import run_warm

    try:
        source = source_from_recipes(
            [version_recipe(kv)], tokenizer=tokenizer, endpoint=endpoints[0], model=options.model
        )
        plan = plan_warm(source)
        report = run_warm(plan, endpoints, options)
    except PrefixplanError as err:
        log.warning("warming %s failed: %s", kv.label, err)
        return WarmOutcome({FLEET: "failed", **{e.label: "failed" for e in endpoints}})
    if record:
        try:
            record_report(report, db)
        except PrefixplanError as err:
            log.warning("cannot record the warm run of %s: %s", kv.label, err)
    states = {r.endpoint: r.status for r in report.results}
    verdict = report.keys[0].status if report.keys else "failed"
    for r in report.results:
        if r.status != "verified":
            log.warning("warming %s on %s: %s (%s)", kv.label, r.endpoint, r.status, r.error)
    ids = plan.items[0].token_ids if len(plan.items) == 1 else None
    sizes = {r.endpoint: int(r.block_size) for r in report.replicas if r.block_size}
    return WarmOutcome({FLEET: verdict, **states}, ids, sizes)


class Warmer:
    """Runs background warms, one per key version at a time, and records their states."""

    def __init__(
        self,
        backend: Backend,
        endpoints: Sequence[Endpoint],
        options: WarmOptions,
        *,
        tokenizer: str | None = None,
        db: str | None = None,
        record: bool = True,
        on_done: Callable[[str, dict[str, str]], None] | None = None,
        warm_fn: Callable[..., WarmOutcome | dict[str, str]] = warm_version,
        salt_of: Callable[[str], str | None] | None = None,
        salt_field: str = "cache_salt",
        on_outcome: Callable[[KeyVersion, WarmOutcome], None] | None = None,
    ) -> None:
        self.backend = backend
        self.endpoints = tuple(endpoints)
        self.options = options
        self.tokenizer = tokenizer
        self.db = db
        self.record = record
        self.on_done = on_done
        self.warm_fn = warm_fn
        self.salt_of = salt_of
        self.salt_field = salt_field
        self.on_outcome = on_outcome
        self.tasks: dict[str, asyncio.Task[dict[str, str]]] = {}

    def schedule(self, kv: KeyVersion) -> asyncio.Task[dict[str, str]]:
        """Start warming ``kv`` unless a warm of it is running in this gateway."""
        for label in [k for k, t in self.tasks.items() if t.done()]:
            del self.tasks[label]  # finished warms are not kept: one entry per key being warmed
        task = self.tasks.get(kv.label)
        if task is None:
            task = asyncio.create_task(self._warm(kv), name=f"warm {kv.label}")
            self.tasks[kv.label] = task
        return task

    def options_for(self, kv: KeyVersion) -> WarmOptions:
        """The warm options of ``kv``: its owner's cache salt, so the warmed blocks are the ones the
        owner's requests hit."""
        salt = self.salt_of(kv.owner) if self.salt_of is not None else None
        return replace(self.options, cache_salt=salt, salt_field=self.salt_field) if salt else self.options

    async def run(self, kv: KeyVersion, endpoints: Sequence[Endpoint]) -> WarmOutcome:
        """Warm ``kv`` on ``endpoints`` off the event loop (no state recorded: the caller's)."""
        got = await asyncio.to_thread(
            self.warm_fn,
            kv,
            tuple(endpoints),
            self.options_for(kv),
            tokenizer=self.tokenizer,
            db=self.db,
            record=self.record,
        )
        return got if isinstance(got, WarmOutcome) else WarmOutcome(dict(got))

    async def _warm(self, kv: KeyVersion) -> dict[str, str]:
        # Nothing may escape: a background task's exception is seen by no one, and the key would
        # stay "warming" until the gateway restarts. Any failure leaves it failed (served, not
        # routed by affinity) and logged.
        try:
            await asyncio.to_thread(self.backend.set_warm, kv.label, {FLEET: "warming"})
            outcome = await self.run(kv, self.endpoints)
            states = outcome.states
            if self.on_outcome is not None:
                self.on_outcome(kv, outcome)
        except Exception as err:
            log.error("warming %s failed: %s: %s", kv.label, type(err).__name__, err)
            states = {FLEET: "failed"}
        try:
            await asyncio.to_thread(self.backend.set_warm, kv.label, states)
        except Exception as err:
            log.error("recording the warm of %s failed: %s: %s", kv.label, type(err).__name__, err)
        log.info("warmed %s: %s", kv.label, json.dumps(states, sort_keys=True))
        if self.on_done is not None:
            self.on_done(kv.label, states)
        return states


class ReadyView:
    """The router's ready sets, refreshed from the backend at most every ``refresh_s`` seconds.

    With ``counts`` (the KV events' view, :meth:`prefixplan.gateway.keyresidency.KeyResidency.counts`)
    a verified replica is in a key's ready set only while the events say its prefix is resident;
    where they say nothing (None) the warm's verification stands."""

    def __init__(self, backend: Backend, router: Router, labels: Sequence[str], refresh_s: float = 1.0) -> None:
        self.backend = backend
        self.router = router
        self.index = {label: i for i, label in enumerate(labels)}
        self.refresh_s = refresh_s
        self._seen: dict[str, float] = {}
        self.status: dict[str, str | None] = {}
        self.states: dict[str, dict[str, str]] = {}
        self.counts: Callable[[str, str], bool | None] | None = None

    def apply(self, key: str, states: dict[str, str]) -> None:
        """Set ``key``'s ready set from its recorded states: ready only when the fleet verdict is."""
        status = fleet_status(states)
        self.status[key] = status
        self.states[key] = dict(states)
        self._seen[key] = time.monotonic()
        if status == "ready":
            self.router.set_ready(key, [self.index[r] for r, s in states.items() if self._counts(key, r, s)])
        else:
            self.router.clear_ready(key)

    def _counts(self, key: str, replica: str, state: str) -> bool:
        if state != "verified" or replica not in self.index:
            return False
        resident = self.counts(key, replica) if self.counts is not None else None
        return resident is not False

    def reapply(self, key: str) -> None:
        """Recompute ``key``'s ready set from its last reading (the events changed its residency)."""
        states = self.states.get(key)
        if states is not None:
            self.apply(key, states)

    def reset(self) -> None:
        """Forget every reading (the state was lost): keys are re-read, and not ready meanwhile."""
        for key in list(self.status):
            self.router.clear_ready(key)
        self.status.clear()
        self.states.clear()
        self._seen.clear()

    async def refresh(self, key: str) -> None:
        """Re-read ``key``'s state when the last reading is older than ``refresh_s``."""
        seen = self._seen.get(key)
        if seen is not None and time.monotonic() - seen < self.refresh_s:
            return
        self._seen[key] = time.monotonic()
        states = await state_call(self.backend.warm, key)
        self.apply(key, states)
