"""The gateway's Starlette application: routes, client keys, start-up and shutdown.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /tokenize`` (expanded like
a completion, answered by a replica's ``/tokenize``: shows the exact ids a keyed request becomes),
``GET /v1/models``, ``GET /v1/prefix_keys/{key}`` (a version's fleet and per-replica warm state, of
the caller's own, shared or locked keys), ``GET /metrics`` (open, or behind its own token),
``GET /healthz`` (the process answers), ``GET /readyz`` (start-up done and a replica answered).
Client keys, when configured, are required on every route but the health checks and ``/metrics``;
each request acts for the tenant of its key (:mod:`prefixplan.gateway.tenants`).

At start the gateway opens its state (SQLite store or Redis), adopts its epoch
(:mod:`prefixplan.gateway.ledger`), registers the keys locked in the repository (``--recipes``
with ``--lock``: a recipe whose content differs from its lock entry is refused, as ``prefixplan
check`` would), and warms every registered key that is not ready yet. Per-key counters are flushed
to the store every ``stats_interval_s`` and at shutdown; the state's epoch is checked every
``state_refresh_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from prefixplan.gateway.bodies import BodyReader
from prefixplan.gateway.config import GatewayConfig
from prefixplan.gateway.events import KeyEvents
from prefixplan.gateway.ledger import Ledger, StateWatch
from prefixplan.gateway.metrics import GatewayMetrics
from prefixplan.gateway.proxy import Proxy, error_response
from prefixplan.gateway.rules import GatewayError, KeyService
from prefixplan.gateway.state import Backend, KeyVersion, SQLiteBackend
from prefixplan.gateway.tenants import LOCK, Principal
from prefixplan.gateway.upstream import Upstreams
from prefixplan.gateway.warm import ReadyView, Warmer, WarmOutcome, warm_version
from prefixplan.routing.policies import Router
from prefixplan.warming.results import WarmOptions

if TYPE_CHECKING:  # pragma: no cover
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

log = logging.getLogger("prefixplan.gateway")


def open_backend(config: GatewayConfig, clock: Callable[[], float] | None = None) -> Backend:
    """The state backend ``config.state`` names (Redis URL) or the SQLite store (``config.db``)."""
    import time

    from prefixplan.gateway.state import SQLiteBackend

    clock = clock or time.time
    if config.state:
        if not config.state.startswith(("redis://", "rediss://", "unix://")):
            from prefixplan.errors import UsageError

            raise UsageError(f"unknown --state {config.state!r}", hint="use redis://HOST:PORT/DB (default: the store)")
        from prefixplan.gateway.redis_state import RedisBackend

        return RedisBackend(config.state, clock)
    return SQLiteBackend(config.db, clock)


def locked_versions(config: GatewayConfig) -> list[KeyVersion]:
    """The recipes' keys as versions, each checked against the lock (what CI checked).

    Raises:
        KeyConflictError: a recipe differs from its lock entry, or is not locked.
    """
    from prefixplan.errors import KeyConflictError
    from prefixplan.gateway.prefix import recipe_parts, wire_hash
    from prefixplan.keys.lockfile import DEFAULT_LOCK, read_lock
    from prefixplan.keys.recipes import load_recipes

    if not config.recipes:
        return []
    lock = read_lock(config.lock or DEFAULT_LOCK)
    out, problems = [], []
    for recipe in load_recipes(config.recipes):
        entry = lock.entries.get(str(recipe.key))
        if entry is None:
            problems.append(f"{recipe.key} is not in the lock (run prefixplan lock)")
            continue
        if entry.hash != recipe.content_hash:
            problems.append(f"{recipe.key} differs from its lock entry (bump the version; prefixplan check)")
            continue
        parts = recipe_parts(recipe)
        out.append(
            KeyVersion(
                name=recipe.name,
                version=recipe.version,
                content_hash=recipe.content_hash,
                wire_hash=wire_hash(parts),
                parts=parts,
                render=recipe.render,
                retain_seconds=recipe.retain,
                source="recipe",
                owner=LOCK,
            )
        )
    if problems:
        raise KeyConflictError("the gateway serves what CI checked: " + "; ".join(problems))
    return out


def pinned_labels(config: GatewayConfig, locked: list[KeyVersion]) -> set[str]:
    """The labels of the locked keys whose recipe says ``pin: true`` (re-warmed when evicted)."""
    if not locked or not config.recipes:
        return set()
    from prefixplan.keys.recipes import load_recipes

    pinned = {str(r.key) for r in load_recipes(config.recipes) if r.pin}
    return {kv.label for kv in locked if kv.key in pinned}


class Gateway:
    """The parts of a running gateway, built on its event loop (:func:`create_app`'s lifespan)."""

    def __init__(self, config: GatewayConfig, backend: Backend, warm_fn: Callable[..., dict[str, str]] | None) -> None:
        self.config = config
        self.backend = backend
        self.tenancy = config.tenants
        self.metrics = GatewayMetrics()
        self.router = Router(len(config.endpoints), config.router)
        labels = [e.label for e in config.endpoints]
        self.ready = ReadyView(backend, self.router, labels, config.state_refresh_s)
        self.events = KeyEvents(config.kv_events, labels, rewarm=config.rewarm)
        self.events.endpoints = {e.label: e for e in config.endpoints}
        if self.events.enabled:
            self.ready.counts = self.events.keys.counts
            self.events.on_residency = self.ready.reapply
        self.metrics.follow(self.events)
        mirror = None if isinstance(backend, SQLiteBackend) else SQLiteBackend(config.db)
        self.ledger = Ledger(mirror)
        where = "key state (" + ("the store" if mirror is None else str(getattr(backend, "url", "Redis"))) + ")"
        self.watch = StateWatch(backend, self.ledger, metrics=self.metrics, on_reset=self._state_reset, where=where)
        self.keys = KeyService(
            backend,
            tenancy=self.tenancy,
            auto_version=config.auto_version,
            retain_seconds=config.retain_seconds,
            ledger=self.ledger,
            watch=self.watch,
        )
        options = WarmOptions(timeout=min(config.timeout, 120.0), model=config.model, concurrency=len(labels))
        self.warmer = (
            Warmer(
                backend,
                config.endpoints,
                options,
                tokenizer=config.tokenizer,
                db=None if config.state else config.db,
                on_done=self._warmed,
                warm_fn=warm_fn or warm_version,
                salt_of=self.tenancy.salt_of,
                salt_field=self.tenancy.salt_field,
                on_outcome=self._outcome,
            )
            if config.warm
            else None
        )
        self.events.warmer = self.warmer
        self.upstreams = Upstreams(config.endpoints, timeout=config.timeout)
        bodies = BodyReader(
            max_bytes=config.max_body_bytes,
            timeout_s=config.body_timeout_s,
            max_in_flight=config.max_bodies_in_flight,
        )
        self.proxy = Proxy(
            self.upstreams,
            self.router,
            self.keys,
            self.metrics,
            self.ready,
            self.warmer,
            bodies=bodies,
            tenancy=self.tenancy,
            retries=config.retries,
            log_prompts=config.log_prompts,
        )
        self.proxy.residency = self.events.keys
        self.proxy.learn = self._learn
        self.started = False
        self.tasks: list[asyncio.Task[None]] = []

    def _learn(self, kv: KeyVersion) -> None:
        """A key in use that the events do not follow yet: warm it (cached blocks stay as they are)
        so its ids are known."""
        if self.warmer is not None and self.events.untracked(kv):
            self.warmer.schedule(kv)

    def _outcome(self, kv: KeyVersion, outcome: WarmOutcome) -> None:
        self.events.warmed(kv, outcome, salt=self.tenancy.salt_of(kv.owner))

    def _warmed(self, key: str, states: dict[str, str]) -> None:
        self.ready.apply(key, states)
        self.metrics.keys_ready.labels(key).set(1 if self.ready.status.get(key) == "ready" else 0)

    def _state_reset(self, versions: list[KeyVersion]) -> None:
        """The state was lost and healed: forget what was read from it and warm the active keys again
        (their warm states went with it)."""
        self.keys.forget()
        self.ready.reset()
        if self.warmer is not None:
            for kv in versions:
                if kv.status == "active":
                    self.warmer.schedule(kv)

    async def start(self) -> None:
        await self.watch.start()
        await self.events.start()
        locked = locked_versions(self.config)
        self.keys.locked = frozenset(kv.name for kv in locked)
        self.events.pinned = pinned_labels(self.config, locked)
        for kv in locked:
            stored, _ = await asyncio.to_thread(self.backend.register, kv)
            if stored.content_hash != kv.content_hash:
                from prefixplan.errors import KeyConflictError

                raise KeyConflictError(
                    f"{kv.key} is registered with hash {stored.content_hash}; the locked recipe hashes to "
                    f"{kv.content_hash}",
                    hint=f"bump the version of {kv.name} in its recipe and run prefixplan lock",
                )
            await asyncio.to_thread(self.ledger.note, stored)
            states = await asyncio.to_thread(self.backend.warm, stored.label)
            self.ready.apply(stored.label, states)
            self.events.versions[stored.label] = stored
            # with KV events, a ready key is warmed again all the same: its exact ids are learned
            # from the warm (cached blocks are not recomputed), and readiness follows the events
            if (states.get("*") != "ready" or self.events.enabled) and self.warmer is not None:
                self.warmer.schedule(stored)
        self.started = True

    async def flush_stats(self) -> None:
        if self.events.enabled:
            await asyncio.to_thread(self._write_residency)
        rows = self.metrics.take_pending()
        if not rows:
            return
        await asyncio.to_thread(self.backend.add_stats, rows)
        if not isinstance(self.backend, SQLiteBackend):  # Redis shares them; the local store keeps them for status
            from prefixplan.store import open_store

            def local() -> None:
                with open_store(self.config.db) as store:
                    store.add_key_stats(rows)

            await asyncio.to_thread(local)

    def _write_residency(self) -> None:
        """The residency view for ``prefixplan status --key-stats`` (this gateway's local store)."""
        import json

        from prefixplan.gateway.stats import RESIDENCY
        from prefixplan.store import open_store

        view = {label: self.events.keys.view(label) for label in self.events.keys.labels()}
        with open_store(self.config.db) as store:
            store.set_gateway_meta(RESIDENCY, json.dumps(view, sort_keys=True))

    async def flusher(self) -> None:
        while True:
            await asyncio.sleep(self.config.stats_interval_s)
            try:
                await self.flush_stats()
            except Exception as err:  # the flusher must outlive a busy store
                log.warning("cannot write per-key statistics: %s", err)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.to_thread(self.events.stop)
        if self.warmer is not None:
            for wtask in self.warmer.tasks.values():
                wtask.cancel()
        await self.flush_stats()
        await self.upstreams.aclose()
        self.backend.close()
        if self.ledger.mirror is not None:
            self.ledger.mirror.close()

    def principal(self, request: Request) -> Principal | None:
        """The tenant ``request`` acts for (None: no valid client key)."""
        return self.tenancy.principal(_bearer(request))

    def metrics_allowed(self, request: Request) -> bool:
        """``/metrics`` is open unless a token was configured (``--metrics-token-env``)."""
        want = self.config.metrics_token_hash
        if want is None:
            return True
        token = _bearer(request)
        digest = "sha256:" + hashlib.sha256(token.encode()).hexdigest()
        return token != "" and hmac.compare_digest(digest, want)


def _bearer(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else ""


def create_app(
    config: GatewayConfig,
    *,
    backend: Backend | None = None,
    warm_fn: Callable[..., dict[str, str]] | None = None,
) -> Starlette:
    """The ASGI app (``uvicorn`` serves it: :func:`prefixplan.gateway.serve.serve`)."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    holder: dict[str, Gateway] = {}

    def gw() -> Gateway:
        return holder["gateway"]

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        g = Gateway(config, backend or open_backend(config), warm_fn)
        holder["gateway"] = g
        await g.start()
        g.tasks = [asyncio.create_task(g.flusher()), asyncio.create_task(g.watch.run(config.state_refresh_s))]
        if g.events.enabled and g.warmer is not None:
            g.tasks.append(asyncio.create_task(g.events.run()))
        try:
            yield
        finally:
            await g.stop()

    def guarded(handler: Callable[[Request, Principal], Any]) -> Callable[[Request], Any]:
        async def run(request: Request) -> Response:
            principal = gw().principal(request)
            if principal is None:
                err = GatewayError(401, "invalid_api_key", "missing or unknown API key (Authorization: Bearer KEY)")
                err.err_type = "authentication_error"
                return error_response(err)
            try:
                return await handler(request, principal)
            except Exception:  # a bug must not show a traceback, nor leave the client without an answer
                log.exception("unexpected error on %s", request.url.path)
                err = GatewayError(500, "internal_error", "the gateway failed on this request (logged)", "server_error")
                return error_response(err)

        return run

    async def chat(request: Request, principal: Principal) -> Response:
        return await gw().proxy.completion(request, "/v1/chat/completions", principal)

    async def completions(request: Request, principal: Principal) -> Response:
        return await gw().proxy.completion(request, "/v1/completions", principal)

    async def tokenize(request: Request, principal: Principal) -> Response:
        return await gw().proxy.completion(request, "/tokenize", principal)

    async def models(request: Request, principal: Principal) -> Response:
        return await gw().proxy.get("/v1/models")

    async def key_state(request: Request, principal: Principal) -> Response:
        g = gw()
        try:
            kv = await g.keys.expand_target(principal, request.path_params["key"])
        except GatewayError as err:
            return error_response(err)
        states = await asyncio.to_thread(g.backend.warm, kv.label)
        g.ready.apply(kv.label, states)
        return JSONResponse(
            {
                "key": kv.key,
                "status": states.get("*", "registered"),
                "replicas": {k: v for k, v in states.items() if k != "*"},
                "residency": g.events.replica_view(kv.label, states),
                "content_hash": kv.content_hash,
                "wire_hash": kv.wire_hash,
                "source": kv.source,
                "version_status": kv.status,
            }
        )

    async def metrics(request: Request) -> Response:
        g = gw()
        if not g.metrics_allowed(request):
            err = GatewayError(401, "invalid_api_key", "/metrics needs its token (Authorization: Bearer TOKEN)")
            err.err_type = "authentication_error"
            return error_response(err)
        body, ctype = g.metrics.render()
        return Response(body, media_type=ctype)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        g = holder.get("gateway")
        if g is None or not g.started:
            return JSONResponse({"status": "starting"}, status_code=503)
        out = await g.proxy.get("/v1/models")
        ok = out.status_code == 200
        return JSONResponse({"status": "ready" if ok else "no replica answers"}, status_code=200 if ok else 503)

    routes = [
        Route("/v1/chat/completions", guarded(chat), methods=["POST"]),
        Route("/v1/completions", guarded(completions), methods=["POST"]),
        Route("/tokenize", guarded(tokenize), methods=["POST"]),
        Route("/v1/models", guarded(models), methods=["GET"]),
        Route("/v1/prefix_keys/{key}", guarded(key_state), methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.holder = holder
    return app
