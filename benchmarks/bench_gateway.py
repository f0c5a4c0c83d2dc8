"""Latency ``prefixplan gateway`` adds over calling the engine directly, beside a bare proxy.

    python benchmarks/bench_gateway.py                      # starts a real vLLM (scripts/vllm_server.py)
    python benchmarks/bench_gateway.py --upstream http://127.0.0.1:8011
    python benchmarks/bench_gateway.py --upstream stub      # an instant canned upstream: proxy cost only

Three targets answer the same requests, in interleaved rounds (so drift hits all alike):

* ``direct``  -- the upstream itself;
* ``bare``    -- a pass-through proxy on the same stack as the gateway (Starlette on uvicorn with
  uvloop/httptools, one pooled ``httpx.AsyncClient``), forwarding the body bytes unchanged: the
  cost of the framework and one extra hop;
* ``gateway`` -- ``prefixplan gateway`` (cache-aware routing, a keyed request expanded from
  ``prefix_key``, metrics, usage parsing);
* ``residency+key`` -- a second gateway with ``--router residency`` following the upstream's KV
  events (``kv_events`` in its endpoints file: the real vLLM this script starts publishes them; a
  given ``--upstream`` with ``--kv-events ENDPOINT``; the stub publishes none, so its gateway's
  subscriber waits on an ipc endpoint and the key is scored from its warm state), keyed requests.

For 1 and 64 concurrent clients it prints p50/p99 of the non-streaming latency and of the
streaming TTFT (first content chunk), the added p50/p99 of ``bare`` and ``gateway`` over
``direct`` (difference of the percentiles), and the CPU time the proxy process spent per request
(from /proc: unlike wall-clock latency it does not move when other work shares the cores). Target (issue 11): gateway p50 added < 1 ms, p99 < 5 ms.
On a 2-core machine the load generator, the proxies and the engine share the cores: read the
64-client figures as contention, and compare the gateway with the bare proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SYSTEM = "You are the Acme support assistant. " + " ".join(f"Policy {i}: be precise." for i in range(120))

BARE_PROXY = """
import contextlib, httpx, os
from starlette.applications import Starlette
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
UP = os.environ["BENCH_UPSTREAM"]
client = None
@contextlib.asynccontextmanager
async def lifespan(app):
    global client
    client = httpx.AsyncClient(base_url=UP, timeout=300,
        limits=httpx.Limits(max_connections=512, max_keepalive_connections=256))
    yield
    await client.aclose()
async def proxy(request):
    body = await request.body()
    req = client.build_request("POST", request.url.path, content=body, headers={"content-type": "application/json"})
    resp = await client.send(req, stream=True)
    if b'"stream":true' in body.replace(b" ", b""):
        async def gen():
            try:
                async for chunk in resp.aiter_raw():
                    yield chunk
            finally:
                await resp.aclose()
        return StreamingResponse(gen(), status_code=resp.status_code, media_type="text/event-stream")
    content = await resp.aread()
    await resp.aclose()
    return Response(content, status_code=resp.status_code, media_type="application/json")
app = Starlette(routes=[Route("/v1/chat/completions", proxy, methods=["POST"])], lifespan=lifespan)
"""

STUB_UPSTREAM = """
import json
from starlette.applications import Starlette
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
USAGE = {"prompt_tokens": 700, "completion_tokens": 4, "total_tokens": 704,
         "prompt_tokens_details": {"cached_tokens": 640}}
BODY = json.dumps({"id": "x", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "length"}],
    "usage": USAGE}).encode()
CHUNK = b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"ok"}}]}\\n\\n'
LAST = ('data: ' + json.dumps({"id": "x", "choices": [], "usage": USAGE}) + '\\n\\ndata: [DONE]\\n\\n').encode()
async def chat(request):
    body = json.loads(await request.body())
    if body.get("stream"):
        async def gen():
            for _ in range(4):
                yield CHUNK
            yield LAST
        return StreamingResponse(gen(), media_type="text/event-stream")
    return Response(BODY, media_type="application/json")
async def models(request):
    return Response(b'{"object":"list","data":[{"id":"m","object":"model","owned_by":"stub"}]}',
                    media_type="application/json")
app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                        Route("/v1/models", models, methods=["GET"])])
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], path: str = "/v1/models", limit: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + limit
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + path, timeout=5).status_code < 500:  # any answer: the server is up
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{url} did not start")
        time.sleep(0.1)


PIDS: dict[str, int] = {}


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def uvicorn_app(source: str, env: dict[str, str], ready_path: str) -> Iterator[str]:
    """Serve the app in ``source`` with uvicorn (uvloop, httptools) in its own process."""
    folder = Path(tempfile.mkdtemp())
    (folder / "benchapp.py").write_text(source)
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", "benchapp:app", "--port", str(port), "--log-level", "warning"]
    cmd += ["--no-access-log", "--loop", "uvloop", "--http", "httptools"]
    proc = subprocess.Popen(cmd, cwd=folder, env={**os.environ, **env})
    url = f"http://127.0.0.1:{port}"
    PIDS[url] = proc.pid
    try:
        wait_ready(url, proc, ready_path)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@contextlib.contextmanager
def gateway(upstream: str, workdir: Path, events: dict | None = None) -> Iterator[str]:
    """The gateway (``events``: with ``--router residency`` following those KV events, and warming)."""
    port = free_port()
    cmd = [sys.executable, "-m", "prefixplan.cli.app", "gateway", "--port", str(port)]
    if events is None:
        cmd += ["--endpoint", upstream, "--db", str(workdir / "bench.db"), "--no-warm"]
    else:
        fleet = workdir / "fleet-events.yaml"
        fleet.write_text(json.dumps({"replicas": [{"url": upstream, "name": "r0", "kv_events": events}]}))
        cmd += ["--endpoints", str(fleet), "--db", str(workdir / "bench-residency.db"), "--router", "residency"]
    proc = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    PIDS[url] = proc.pid
    try:
        wait_ready(url, proc, "/readyz")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@contextlib.contextmanager
def real_vllm() -> Iterator[str]:
    sys.path.insert(0, str(ROOT / "scripts"))
    import vllm_server  # type: ignore[import-not-found]

    info, proc = vllm_server.start(log_path=ROOT / ".cache" / "bench-vllm.log", kv_events=True)
    EVENTS.update(endpoint=info.kv_events_endpoint, replay_endpoint=info.kv_events_replay)
    try:
        yield info.url
    finally:
        vllm_server.stop_process(proc.pid)


def body(model: str, i: int, stream: bool, keyed: bool) -> dict:
    messages = [{"role": "user", "content": f"Question {i}?"}]
    out: dict = {"model": model, "max_tokens": 4, "temperature": 0, "stream": stream}
    if keyed:
        out["prefix_key"] = "bench@v1"
    else:
        messages.insert(0, {"role": "system", "content": SYSTEM})
    out["messages"] = messages
    if stream:
        out["stream_options"] = {"include_usage": True}
    return out


ERRORS: dict[str, int] = {}
EVENTS: dict[str, str] = {}


async def one(client, url: str, payload: dict) -> float:  # type: ignore[no-untyped-def]
    """:func:`attempt`, retried (and counted) when a connection is reset under load."""
    import httpx

    for _ in range(3):
        try:
            return await attempt(client, url, payload)
        except httpx.TransportError as err:
            ERRORS[type(err).__name__] = ERRORS.get(type(err).__name__, 0) + 1
    return await attempt(client, url, payload)


async def attempt(client, url: str, payload: dict) -> float:  # type: ignore[no-untyped-def]
    """Seconds to the whole answer (non-streaming) or to the first content chunk (streaming)."""
    t0 = time.perf_counter()
    if not payload["stream"]:
        r = await client.post(url + "/v1/chat/completions", json=payload)
        r.raise_for_status()
        return time.perf_counter() - t0
    async with client.stream("POST", url + "/v1/chat/completions", json=payload) as r:
        r.raise_for_status()
        first = None
        async for line in r.aiter_lines():
            if first is None and line.startswith("data:") and '"content"' in line:
                first = time.perf_counter() - t0
        return first if first is not None else time.perf_counter() - t0


async def batch(client, url: str, model: str, n: int, conc: int, stream: bool, keyed: bool) -> list[float]:  # type: ignore[no-untyped-def]
    out: list[float] = []
    counter = iter(range(n))

    async def worker() -> None:
        for i in counter:
            out.append(await one(client, url, body(model, i, stream, keyed)))

    await asyncio.gather(*(worker() for _ in range(conc)))
    return out


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


async def measure(targets: dict[str, str], model: str, n: int, rounds: int, conc: int, stream: bool) -> dict:
    import httpx

    limits = httpx.Limits(max_connections=conc + 8, max_keepalive_connections=conc + 8, keepalive_expiry=4.0)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        for url in targets.values():  # warm connections and the engine's cache
            await batch(client, url, model, min(n, 2 * conc), conc, stream, False)
        samples: dict[str, list[float]] = {name: [] for name in targets}
        for _ in range(rounds):
            for name, url in targets.items():
                before = cpu_seconds(PIDS.get(url))
                samples[name] += await batch(client, url, model, n, conc, stream, name.endswith("+key"))
                CPU.setdefault((conc, stream, name), []).append(cpu_seconds(PIDS.get(url)) - before)
    return samples


CPU: dict[tuple[int, bool, str], list[float]] = {}


def wait_key(url: str, limit: float = 300) -> None:
    """Wait until the residency gateway's key is ready on its replica per the KV events."""
    import httpx

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        res = httpx.get(url + "/v1/prefix_keys/bench@v1", timeout=10).json().get("residency", {})
        if res.get("r0", {}).get("state") == "ready":
            return
        time.sleep(0.2)
    raise RuntimeError(f"bench@v1 never ready per the KV events: {res}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", default=None, help="engine URL, 'stub', or nothing to start a real vLLM")
    ap.add_argument("--model", default=None)
    ap.add_argument("--requests", type=int, default=100, help="requests per target per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", default="1,64")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--kv-events", default=None, help="the --upstream engine's KV events endpoint (ipc:// or tcp://)")
    args = ap.parse_args()
    import httpx

    work = Path(tempfile.mkdtemp())
    with contextlib.ExitStack() as stack:
        if args.upstream == "stub":
            upstream = stack.enter_context(uvicorn_app(STUB_UPSTREAM, {}, "/v1/models"))
            kind = "stub upstream (canned answers, no engine)"
        elif args.upstream:
            upstream, kind = args.upstream, "engine at " + args.upstream
            if args.kv_events:
                EVENTS["endpoint"] = args.kv_events
        else:
            upstream, kind = stack.enter_context(real_vllm()), "real vLLM (CPU, tiny Qwen3)"
        model = args.model or httpx.get(upstream + "/v1/models").json()["data"][0]["id"]
        bare = stack.enter_context(uvicorn_app(BARE_PROXY, {"BENCH_UPSTREAM": upstream}, "/"))
        gw = stack.enter_context(gateway(upstream, work))
        events = dict(EVENTS) or {"endpoint": f"ipc://{work}/no-events.pub"}
        res = stack.enter_context(gateway(upstream, work, events))
        # Register the key once (full prefix), so the keyed targets are expanded by the gateways.
        reg = body(model, 0, False, False)
        reg["prefix_key"] = "bench@v1"
        for url in (gw, res):
            httpx.post(url + "/v1/chat/completions", json=reg, timeout=120).raise_for_status()
        if EVENTS:  # the key tracked from its warm, resident per the events
            wait_key(res)
        targets = {"direct": upstream, "bare": bare, "gateway": gw, "gateway+key": gw, "residency+key": res}
        results: dict = {"upstream": kind, "cpus": os.cpu_count(), "runs": []}
        print(f"upstream: {kind}; {os.cpu_count()} CPUs; {args.requests} requests x {args.rounds} rounds per target")
        for conc in (int(c) for c in args.concurrency.split(",")):
            for stream in (False, True):
                what = "TTFT (stream)" if stream else "latency (non-stream)"
                s = asyncio.run(measure(targets, model, args.requests, args.rounds, conc, stream))
                base50, base99 = pct(s["direct"], 0.5), pct(s["direct"], 0.99)
                print(f"\n{conc} concurrent clients, {what}, ms")
                print(
                    f"  {'target':12} {'p50':>9} {'p99':>9} {'added p50':>10} {'added p99':>10} {'proxy CPU/req':>14}"
                )
                for name, xs in s.items():
                    p50, p99 = pct(xs, 0.5), pct(xs, 0.99)
                    add = " " * 21 if name == "direct" else f"{1e3 * (p50 - base50):10.2f} {1e3 * (p99 - base99):10.2f}"
                    cpu = sum(CPU.get((conc, stream, name), [])) / len(xs) if name != "direct" else None
                    cpu_txt = f"{1e3 * cpu:14.3f}" if cpu is not None else ""
                    print(f"  {name:12} {1e3 * p50:9.2f} {1e3 * p99:9.2f} {add} {cpu_txt}")
                    results["runs"].append(
                        {
                            "concurrency": conc,
                            "stream": stream,
                            "target": name,
                            "n": len(xs),
                            "p50_ms": round(1e3 * p50, 3),
                            "p99_ms": round(1e3 * p99, 3),
                            "mean_ms": round(1e3 * statistics.fmean(xs), 3),
                            "added_p50_ms": None if name == "direct" else round(1e3 * (p50 - base50), 3),
                            "added_p99_ms": None if name == "direct" else round(1e3 * (p99 - base99), 3),
                            "proxy_cpu_ms_per_request": None if cpu is None else round(1e3 * cpu, 3),
                        }
                    )
        if ERRORS:
            print(f"\nconnection errors retried: {ERRORS}")
        results["connection_errors_retried"] = ERRORS
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
