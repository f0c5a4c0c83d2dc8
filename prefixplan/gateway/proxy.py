"""One proxied request: read, apply ``prefix_key``, route, forward (retrying), answer, count.

Answers carry headers saying what happened: ``x-prefixplan-replica`` (label), ``x-prefixplan-route``
(the routing reason), ``x-prefixplan-key`` (the ``name@vN`` used) and ``x-prefixplan-registered``
(when the request registered a version). Streams get ``stream_options.include_usage`` so the
gateway can count tokens: they end with the usage chunk the OpenAI API defines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from prefixplan.gateway.bodies import BodyReader
from prefixplan.gateway.keyresidency import KeyResidency, router_residency
from prefixplan.gateway.metrics import GatewayMetrics
from prefixplan.gateway.prefix import expand_chat, expand_completion, request_parts
from prefixplan.gateway.rules import GatewayError, KeyService
from prefixplan.gateway.tenants import Principal, Tenancy
from prefixplan.gateway.upstream import StreamUsage, UpstreamFailure, Upstreams, response_headers, usage_of
from prefixplan.gateway.warm import ReadyView, Warmer
from prefixplan.routing.content import request_route_bytes, route_units
from prefixplan.routing.policies import Decision, Router

if TYPE_CHECKING:  # pragma: no cover
    import httpx
    from starlette.requests import Request
    from starlette.responses import Response

    from prefixplan.gateway.state import KeyVersion


log = logging.getLogger("prefixplan.gateway")


def error_response(err: GatewayError, headers: dict[str, str] | None = None) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse(err.body(), status_code=err.status, headers={**(headers or {}), **err.headers})


async def _disconnected(request: Request) -> None:
    """Return when the client goes away (the body has been read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class Proxy:
    """The request path of the gateway (see module docstring)."""

    def __init__(
        self,
        upstreams: Upstreams,
        router: Router,
        keys: KeyService,
        metrics: GatewayMetrics,
        ready: ReadyView,
        warmer: Warmer | None,
        *,
        bodies: BodyReader,
        tenancy: Tenancy | None = None,
        retries: int = 2,
        log_prompts: bool = False,
    ) -> None:
        self.upstreams = upstreams
        self.router = router
        self.keys = keys
        self.metrics = metrics
        self.ready = ready
        self.warmer = warmer
        self.bodies = bodies
        self.tenancy = tenancy or Tenancy()
        self.retries = retries
        self.log_prompts = log_prompts
        self.needs_units = router.config.policy != "round-robin"
        self.residency: KeyResidency | None = None  # the KV events' view (predictions, the router)
        self.learn: Callable[[KeyVersion], None] | None = None  # a key used: track it if it is not yet

    # -- reading ------------------------------------------------------------------------------------
    def salt(self, body: dict[str, Any], principal: Principal) -> None:
        """Where any tenant is salted the gateway owns the salt field: the tenant's salt, or none
        (a client must not pick another tenant's salt to read its cache)."""
        if not self.tenancy.salted:
            return
        body.pop(self.tenancy.salt_field, None)
        if principal.cache_salt:
            body[self.tenancy.salt_field] = principal.cache_salt

    async def apply_key(
        self, body: dict[str, Any], chat: bool, headers: dict[str, str], principal: Principal
    ) -> tuple[dict[str, Any], str | None]:
        """Expand or check ``prefix_key`` for ``principal`` (module :mod:`prefixplan.gateway.rules`);
        the body to send and the version's label (routing, metrics) used."""
        if "prefix_key" not in body:
            return body, None
        ref = body.pop("prefix_key")
        try:
            own = request_parts(body) if chat else None
            if own is None:
                kv = await self.keys.expand_target(principal, ref)
                if chat:
                    body = expand_chat(body, kv.parts)
                elif isinstance(body.get("prompt"), str):
                    body = expand_completion(body, kv.parts)
                else:
                    raise GatewayError(400, "invalid_prompt", "a keyed completion needs a text prompt")
            else:
                res = await self.keys.check_or_register(principal, ref, own)
                kv = res.version
                if res.registered:
                    self.metrics.key_events.labels("registered").inc()
                    headers["x-prefixplan-registered"] = res.note or kv.key
                    if self.warmer is not None:
                        self.warmer.schedule(kv)
        except GatewayError as err:
            event = {403: "forbidden", 404: "not_found", 409: "conflict", 410: "expired", 503: "state_unavailable"}.get(
                err.status, "invalid"
            )
            self.metrics.key_events.labels(event).inc()
            raise
        headers["x-prefixplan-key"] = kv.key
        await self.ready.refresh(kv.label)
        if self.learn is not None:
            self.learn(kv)
        return body, kv.label

    def units(self, body: dict[str, Any]) -> list[int]:
        if not self.needs_units:
            return []
        messages = body.get("messages") if isinstance(body.get("messages"), list) else None
        tools = body.get("tools") if isinstance(body.get("tools"), list) else None
        return route_units(request_route_bytes(messages, tools, body.get("prompt")))

    # -- the request --------------------------------------------------------------------------------
    async def completion(self, request: Request, path: str, principal: Principal) -> Response:
        """``POST /v1/chat/completions`` and ``/v1/completions`` (and ``/tokenize``)."""
        import orjson

        headers: dict[str, str] = {}
        try:
            body = await self.bodies.read(request)
            body, key = await self.apply_key(
                body, chat="messages" in body or path.endswith("chat/completions"), headers=headers, principal=principal
            )
            self.salt(body, principal)
            stream = bool(body.get("stream")) and path != "/tokenize"
            if stream:
                opts = body.get("stream_options")
                body["stream_options"] = (
                    dict(opts, include_usage=True) if isinstance(opts, dict) else {"include_usage": True}
                )
            payload = orjson.dumps(body)
        except GatewayError as err:
            return error_response(err, headers)
        except orjson.JSONEncodeError:
            return error_response(GatewayError(400, "invalid_request", "the request nests too deeply to forward"))
        if self.log_prompts:
            log.info("request %s key=%s body=%s", path, key, payload.decode())
        units = self.units(body)
        tried: set[int] = set()
        failures: list[str] = []
        for _ in range(self.retries + 1):
            if len(tried) == len(self.upstreams.labels):
                tried = set()  # every replica failed once: the retries left go round again
            decision = self.router.choose(units, key=key, exclude=tried, resident=self.resident(key))
            rep, prefill = decision.replica, decision.prefill
            tried.add(rep)
            predicted = self._predict(key, rep)
            self.router.start(rep, prefill)
            t0 = time.perf_counter()
            try:
                outcome = await self._send(request, rep, path, payload, stream)
            except BaseException:
                self.router.finish(rep, prefill)  # never leave a replica counted busy by a request that ended
                raise
            if isinstance(outcome, UpstreamFailure):
                self.router.finish(rep, prefill)
                label = self.upstreams.labels[rep]
                failures.append(f"{label}: {outcome.kind}: {outcome.detail}")
                self.metrics.upstream_errors.labels(label, outcome.kind).inc()
                log.warning("replica %s failed (%s): %s", label, outcome.kind, outcome.detail)
                continue
            if outcome is None:  # the client went away; the upstream request was cancelled
                self.router.finish(rep, prefill)
                return error_response(GatewayError(499, "client_closed", "client disconnected"))
            self.router.observe(rep, units)
            self._note_decision(decision, headers)
            if stream and outcome.status_code < 400:
                return self._stream(outcome, rep, key, t0, headers, predicted, prefill)
            return await self._answer(outcome, rep, key, t0, headers, predicted, prefill)
        detail = "; ".join(failures) if failures else "no replica"
        unavailable = GatewayError(
            502, "upstream_unavailable", f"no replica could serve the request ({detail})", "server_error"
        )
        return error_response(unavailable, headers)

    async def _send(
        self, request: Request, rep: int, path: str, payload: bytes, stream: bool
    ) -> httpx.Response | UpstreamFailure | None:
        up = self.upstreams.build(rep, "POST", path, payload)
        task = asyncio.ensure_future(self.upstreams.send(rep, up, stream=stream))
        watch = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
        if not task.done():
            task.cancel()
            log.info("client disconnected: cancelled its request to %s", self.upstreams.labels[rep])
            return None
        return task.result()

    def resident(self, key: str | None) -> list[int | None] | None:
        """The residency router's view of ``key`` per replica (:func:`router_residency`)."""
        if key is None or self.router.config.policy != "residency" or self.residency is None:
            return None
        return router_residency(self.residency, self.upstreams.labels, key, self.router.ready_replicas(key))

    def _predict(self, key: str | None, rep: int) -> int | None:
        """Cached tokens the KV events predict for a keyed request on ``rep``: its key's prefix
        resident there at send time (None: no events view; the rest of the prompt is not counted)."""
        if key is None or self.residency is None:
            return None
        return self.residency.resident_tokens(key, self.upstreams.labels[rep])

    def _note_decision(self, decision: Decision, headers: dict[str, str]) -> None:
        label = self.upstreams.labels[decision.replica]
        headers["x-prefixplan-replica"] = label
        headers["x-prefixplan-route"] = decision.reason
        self.metrics.decisions.labels(label, decision.reason).inc()

    async def _answer(
        self,
        resp: httpx.Response,
        rep: int,
        key: str | None,
        t0: float,
        headers: dict[str, str],
        predicted: int | None = None,
        prefill: int = 0,
    ) -> Response:
        import orjson
        from starlette.responses import Response

        try:
            content = await resp.aread()
        finally:
            self.router.finish(rep, prefill)
            await resp.aclose()
        ttft = time.perf_counter() - t0
        prompt = cached = None
        if resp.status_code < 400:
            with contextlib.suppress(orjson.JSONDecodeError):
                prompt, cached = usage_of(orjson.loads(content))
        self.metrics.observe(key, self.upstreams.labels[rep], resp.status_code, prompt, cached, ttft)
        if predicted is not None:
            self.metrics.prediction(self.upstreams.labels[rep], predicted, cached)
        redact = self.upstreams.redactor(rep)
        return Response(
            redact.body(content),
            status_code=resp.status_code,
            headers={**redact.headers(response_headers(resp)), **headers},
        )

    def _stream(
        self,
        resp: httpx.Response,
        rep: int,
        key: str | None,
        t0: float,
        headers: dict[str, str],
        predicted: int | None = None,
        prefill: int = 0,
    ) -> Response:
        from starlette.responses import StreamingResponse

        usage = StreamUsage()
        redact = self.upstreams.redactor(rep)
        label = self.upstreams.labels[rep]
        state: dict[str, float | None] = {"ttft": None}
        finished: list[bool] = []

        def done() -> None:
            if not finished:
                finished.append(True)
                self.router.finish(rep, prefill)

        async def chunks() -> AsyncIterator[bytes]:
            import httpx
            import orjson

            code = resp.status_code
            try:
                async for chunk in resp.aiter_raw():
                    if state["ttft"] is None:
                        state["ttft"] = time.perf_counter() - t0
                    usage.feed(chunk)
                    if b"[DONE]" in chunk:
                        done()  # before the last byte reaches the client: the next request sees the load
                    out = redact.feed(chunk)
                    if out:
                        yield out
                rest = redact.flush()
                if rest:
                    yield rest
            except httpx.HTTPError as err:
                # The replica went away mid-stream (killed, reset, read timeout): the status line is
                # already sent, so the client learns it from a last event, not from a cut stream.
                code = 502
                rest = redact.flush()
                if rest:
                    yield rest
                detail = self.upstreams.redact(rep, f"{type(err).__name__}: {err}")
                self.metrics.upstream_errors.labels(label, "stream_cut").inc()
                log.warning("replica %s failed mid-stream: %s", label, detail)
                message = f"replica {label} failed mid-stream ({detail})"
                event = {"error": {"message": message, "type": "server_error", "code": "upstream_stream_cut"}}
                yield b"data: " + orjson.dumps(event) + b"\n\n"
            finally:
                done()
                await resp.aclose()
                ttft = state["ttft"]
                self.metrics.observe(
                    key,
                    label,
                    code,
                    usage.prompt_tokens,
                    usage.cached_tokens,
                    float(ttft) if ttft else None,
                )
                if predicted is not None:
                    self.metrics.prediction(label, predicted, usage.cached_tokens)

        return StreamingResponse(
            chunks(), status_code=resp.status_code, headers={**redact.headers(response_headers(resp)), **headers}
        )

    async def get(self, path: str) -> Response:
        """A GET passed to the first replica that answers (``/v1/models``)."""
        import httpx
        from starlette.responses import Response

        failures: list[str] = []
        for rep in range(len(self.upstreams.clients)):
            label = self.upstreams.labels[rep]
            out = await self.upstreams.send(rep, self.upstreams.build(rep, "GET", path, None), stream=False)
            if isinstance(out, UpstreamFailure):
                failures.append(f"{label}: {out.kind}: {out.detail}")
                continue
            try:
                content = await out.aread()
            except httpx.HTTPError as err:
                failures.append(f"{label}: refused: {self.upstreams.redact(rep, f'{type(err).__name__}: {err}')}")
                continue
            finally:
                await out.aclose()
            redact = self.upstreams.redactor(rep)
            return Response(
                redact.body(content), status_code=out.status_code, headers=redact.headers(response_headers(out))
            )
        detail = "; ".join(failures) or "no replica configured"
        return error_response(
            GatewayError(502, "upstream_unavailable", f"no replica answered ({detail})", "server_error")
        )
