"""``prefixplan gateway`` against real vLLM replicas (CPU build, tiny random-weight Qwen3 model).

Must-show of issue 11:
- a keyed request end to end: register with the full prefix, then send only ``prefix_key`` and a
  new user message: vLLM's ``/tokenize`` gives the same ids for the expanded and the full request,
  and ``cached_tokens`` >= the block-aligned prefix; 404 / 409 / 410 bodies;
- two replicas: one log replayed through the gateway with round-robin, cache-aware and keyed
  traffic; per request the replica and cached tokens equal what ``simulate --replicas 2 --router``
  predicted, and the fleet cached-token shares side by side;
- two gateway processes sharing one real Redis see each other's ready state;
- a replica killed mid-warm leaves the key partial, never ready (the last test: it kills replica 2).
Figures go to test-artifacts/live-summary.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

pytest.importorskip("starlette")
openai = pytest.importorskip("openai")

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
sys.path.insert(0, str(ROOT / "tests"))
import redis_fixture  # noqa: E402

redis_url = redis_fixture.redis_url  # the fixtures, by name
fresh_redis = redis_fixture.fresh_redis
SUMMARY = ARTIFACTS / "live-summary.json"


@dataclass
class LiveServer:
    """A replica as these tests see it (the session server's fixture yields the same fields)."""

    url: str
    served_model_name: str
    model_dir: Path
    block_size: int

    def reset(self) -> None:
        """Drop the prefix cache (``VLLM_SERVER_DEV_MODE=1``)."""
        httpx.post(self.url + "/reset_prefix_cache", timeout=30).raise_for_status()


def _summary(key: str, value: object) -> None:
    SUMMARY.parent.mkdir(exist_ok=True)
    data = json.loads(SUMMARY.read_text()) if SUMMARY.is_file() else {}
    data[key] = value
    SUMMARY.write_text(json.dumps(data, indent=2) + "\n")
    print(f"{key}: {json.dumps(value)}")


def _server_module():
    spec = importlib.util.spec_from_file_location("vllm_server_script", ROOT / "scripts" / "vllm_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _unavailable(reason: str) -> None:
    if os.environ.get("PREFIXPLAN_REQUIRE_LIVE") == "1":
        pytest.fail(f"live vLLM required (PREFIXPLAN_REQUIRE_LIVE=1) but unavailable: {reason}", pytrace=False)
    pytest.skip(f"second vLLM replica unavailable: {reason}")


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Find an order by its number.",
            "parameters": {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
        },
    }
]
SYSTEMS = {
    "acme": "You are the Acme Cloud support assistant. "
    + " ".join(f"Policy {i}: answer precisely and cite section {i}." for i in range(45)),
    "globex": "You are Globex's travel planner. "
    + " ".join(f"Rule {i}: prefer trains when the trip is under {i + 3} hours." for i in range(60)),
    "initech": "Initech code reviewer. "
    + " ".join(f"Check {i}: flag functions longer than {i + 20} lines." for i in range(30)),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def second_replica(vllm_server: LiveServer) -> Iterator[tuple[LiveServer, int]]:
    """A second real vLLM (the same tiny model): replica r1 of the gateway tests. Yields it and its pid."""
    mod = _server_module()
    python = Path(os.environ.get("PREFIXPLAN_VLLM_PYTHON", mod.DEFAULT_PYTHON))
    log = ARTIFACTS / "vllm-server-2.log"
    try:
        info, proc = mod.start(vllm_server.model_dir, python=python, log_path=log, timeout=300)
    except mod.ServerError as err:
        _unavailable(str(err))
    try:
        block = int(info.block_size or vllm_server.block_size)
        yield LiveServer(info.url, info.served_model_name, Path(info.model_dir), block), proc.pid
    finally:
        mod.stop_process(proc.pid)
        with contextlib.suppress(Exception):
            proc.wait(timeout=30)


@contextlib.contextmanager
def gateway(tmp: Path, replicas: list[str], *args: str, name: str = "gateway") -> Iterator[str]:
    """``prefixplan gateway`` in its own process (cwd ``tmp``: no recipes), stopped with SIGTERM."""
    fleet = tmp / f"{name}-fleet.yaml"
    fleet.write_text("replicas:\n" + "".join(f"  - url: {u}\n    name: r{i}\n" for i, u in enumerate(replicas)))
    port = _free_port()
    log = ARTIFACTS / f"{name}.log"
    cmd = [sys.executable, "-m", "prefixplan.cli.app", "gateway", "--endpoints", str(fleet), "--port", str(port)]
    cmd += ["--db", str(tmp / f"{name}.db"), *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=tmp, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"gateway did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _wait_status(url: str, key: str, limit: float = 180.0) -> dict:
    """Poll the gateway until ``key``'s background warm finished (never a fixed sleep)."""
    deadline = time.monotonic() + limit
    while True:
        state = httpx.get(f"{url}/v1/prefix_keys/{key}", timeout=10).json()
        if state["status"] not in ("warming", "registered"):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"{key} still warming: {state}")
        time.sleep(0.1)


def _tokenize(url: str, body: dict) -> list[int]:
    r = httpx.post(url + "/tokenize", json=dict(body, add_generation_prompt=True), timeout=60)
    r.raise_for_status()
    return r.json()["tokens"]


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _reset(*servers: LiveServer) -> None:
    for s in servers:
        s.reset()


def test_keyed_request_end_to_end(vllm_server: LiveServer, second_replica, tmp_path: Path) -> None:
    replica2, _ = second_replica
    _reset(vllm_server, replica2)
    model = vllm_server.served_model_name
    system = {"role": "system", "content": SYSTEMS["acme"]}
    question = {"role": "user", "content": "Where is order 7?"}
    with gateway(tmp_path, [vllm_server.url, replica2.url]) as url:
        client = _client(url)
        reg = client.chat.completions.with_raw_response.create(
            model=model, messages=[system, question], tools=TOOLS, max_tokens=1, extra_body={"prefix_key": "acme@v1"}
        )
        assert reg.headers["x-prefixplan-registered"] == "acme@v1 registered"
        state = _wait_status(url, "acme@v1")
        assert state["status"] == "ready" and state["replicas"] == {"r0": "verified", "r1": "verified"}, state
        # The ids vLLM computes for the expanded request equal those of the full request.
        new_q = {"role": "user", "content": "Can I return the blue jacket?"}
        full = _tokenize(vllm_server.url, {"model": model, "messages": [system, new_q], "tools": TOOLS})
        expanded = _tokenize(url, {"model": model, "messages": [new_q], "prefix_key": "acme"})
        assert expanded == full
        other = _tokenize(vllm_server.url, {"model": model, "messages": [system, question], "tools": TOOLS})
        prefix_len = _common(full, other)  # the shared prefix: up to the user's message
        block = vllm_server.block_size
        aligned = prefix_len // block * block
        assert aligned >= 2 * block
        keyed = client.chat.completions.with_raw_response.create(
            model=model, messages=[new_q], max_tokens=1, extra_body={"prefix_key": "acme"}
        )
        assert keyed.headers["x-prefixplan-key"] == "acme@v1" and keyed.headers["x-prefixplan-route"] == "affinity"
        usage = keyed.parse().usage
        assert usage.prompt_tokens == len(full)
        assert usage.prompt_tokens_details.cached_tokens >= aligned
        # 404, 409 and 410, OpenAI-style.
        with pytest.raises(openai.NotFoundError) as nf:
            client.chat.completions.create(
                model=model, messages=[new_q], max_tokens=1, extra_body={"prefix_key": "nope"}
            )
        edited = {"role": "system", "content": SYSTEMS["acme"].replace("Policy 7", "Policy seven")}
        with pytest.raises(openai.ConflictError) as cf:
            client.chat.completions.create(
                model=model, messages=[edited, new_q], tools=TOOLS, max_tokens=1, extra_body={"prefix_key": "acme@v1"}
            )
        assert nf.value.body["code"] == "prefix_key_not_found"
        assert "system changed at character" in cf.value.body["message"]
        assert "acme@v2" in cf.value.body["message"]
    _summary(
        "gateway_keyed",
        {
            "prefix_tokens": prefix_len,
            "aligned_prefix": aligned,
            "prompt_tokens": usage.prompt_tokens,
            "cached_tokens": usage.prompt_tokens_details.cached_tokens,
            "expanded_ids_equal_full": True,
        },
    )


def test_expired_version_is_410(vllm_server: LiveServer, tmp_path: Path) -> None:
    from prefixplan.gateway.prefix import WirePart, wire_hash
    from prefixplan.gateway.state import KeyVersion, SQLiteBackend

    past = time.time() - 10 * 86400
    backend = SQLiteBackend(str(tmp_path / "gateway.db"), clock=lambda: past)
    for version, text in ((1, SYSTEMS["initech"]), (2, SYSTEMS["initech"] + " Be brief.")):
        parts = (WirePart("system", text),)
        backend.register(KeyVersion("review", version, wire_hash(parts), wire_hash(parts), parts, retain_seconds=86400))
    backend.close()
    with gateway(tmp_path, [vllm_server.url], "--no-warm") as url:
        client = _client(url)
        msg = [{"role": "user", "content": "def f(): pass"}]
        with pytest.raises(openai.APIStatusError) as gone:
            client.chat.completions.create(
                model=vllm_server.served_model_name, messages=msg, max_tokens=1, extra_body={"prefix_key": "review@v1"}
            )
        assert gone.value.status_code == 410 and gone.value.body["code"] == "prefix_key_expired"
        ok = client.chat.completions.with_raw_response.create(
            model=vllm_server.served_model_name, messages=msg, max_tokens=1, extra_body={"prefix_key": "review"}
        )
        assert ok.headers["x-prefixplan-key"] == "review@v2"


def _routing_log(path: Path, model: str) -> list[dict]:
    """Three system prompts (one with a tool) x 4 users x 2 turns, interleaved so that replicas
    in turn split each prompt's requests; max_tokens 1 so the simulation sees no overlap."""
    lines = []
    for turn in range(2):
        for user in range(4):
            for name, system in SYSTEMS.items():
                msgs = [
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"Question {user} on {name}?"},
                ]
                if turn:
                    msgs += [
                        {"role": "assistant", "content": f"Answer {user}."},
                        {"role": "user", "content": f"Follow-up {user} on {name}."},
                    ]
                line: dict = {"model": model, "user": f"u{user}", "max_tokens": 1, "messages": msgs}
                if name == "acme":
                    line["tools"] = TOOLS
                lines.append(line)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return lines


def _replay(url: str, lines: list[dict], keyed: bool) -> list[dict]:
    client = _client(url)
    seen: set[str] = set()
    out = []
    for line in lines:
        messages, tools = line["messages"], line.get("tools")
        extra = None
        name = next(k for k, v in SYSTEMS.items() if v == messages[0]["content"])
        if keyed:
            extra = {"prefix_key": name}
            if name in seen:  # only the key and the conversation after the prefix
                messages, tools = messages[1:], None
        kw = {"tools": tools} if tools else {}
        r = client.chat.completions.with_raw_response.create(
            model=line["model"], messages=messages, max_tokens=1, temperature=0, extra_body=extra, **kw
        )
        usage = r.parse().usage
        out.append(
            {
                "replica": int(r.headers["x-prefixplan-replica"][1:]),
                "route": r.headers["x-prefixplan-route"],
                "prompt": usage.prompt_tokens,
                "cached": usage.prompt_tokens_details.cached_tokens,
            }
        )
        if keyed and name not in seen:
            seen.add(name)
            state = _wait_status(url, r.headers["x-prefixplan-key"])
            assert state["status"] == "ready", state
    return out


def test_routing_policies_match_the_simulation(vllm_server: LiveServer, second_replica, tmp_path: Path) -> None:
    from prefixplan.cli.app import main

    replica2, _ = second_replica
    log = tmp_path / "log.jsonl"
    lines = _routing_log(log, vllm_server.served_model_name)
    sim_json = tmp_path / "sim.json"
    code = main(
        [
            "simulate",
            str(log),
            "--tokenizer",
            f"hf:{vllm_server.model_dir}",
            "--block-size",
            str(vllm_server.block_size),
            "--replicas",
            "2",
            "--router",
            "round-robin,cache-aware,keyed",
            "--json",
            str(sim_json),
            "-q",
        ]
    )
    assert code == 0
    predicted = {f["policy"]: f for f in json.loads(sim_json.read_text())["fleet"]}
    measured = {}
    for policy in ("round-robin", "cache-aware", "keyed"):
        _reset(vllm_server, replica2)
        router = "cache-aware" if policy == "keyed" else policy
        with gateway(tmp_path, [vllm_server.url, replica2.url], "--router", router, name=f"gw-{policy}") as url:
            measured[policy] = _replay(url, lines, keyed=policy == "keyed")
    table = {}
    for policy, rows in measured.items():
        pred = predicted[policy]
        prompt = sum(r["prompt"] for r in rows)
        cached = sum(r["cached"] for r in rows)
        table[policy] = {
            "measured_share": round(cached / prompt, 4),
            "predicted_share": round(pred["hit_rate"], 4),
            "cached_tokens": cached,
            "predicted_cached_tokens": pred["cached_tokens"],
            "prompt_tokens": prompt,
            "predicted_prompt_tokens": pred["prompt_tokens"],
            "requests_per_replica": [sum(r["replica"] == i for r in rows) for i in (0, 1)],
            "routes": sorted({r["route"] for r in rows}),
        }
    _summary("gateway_routing", table)
    for policy, rows in measured.items():
        pred = predicted[policy]
        assert [r["replica"] for r in rows] == pred["replica_per_request"], policy
        assert [r["prompt"] for r in rows] == [int(x) for x in _prompt_tokens(vllm_server, lines)], policy
        assert [r["cached"] for r in rows] == pred["cached_tokens_per_request"], policy
    assert table["cache-aware"]["measured_share"] > table["round-robin"]["measured_share"]
    assert table["keyed"]["measured_share"] >= table["round-robin"]["measured_share"]


_PROMPTS: dict[int, list[int]] = {}


def _prompt_tokens(server: LiveServer, lines: list[dict]) -> list[int]:
    if id(lines) not in _PROMPTS:
        out = []
        for line in lines:
            body = {"model": server.served_model_name, "messages": line["messages"]}
            if line.get("tools"):
                body["tools"] = line["tools"]
            out.append(len(_tokenize(server.url, body)))
        _PROMPTS[id(lines)] = out
    return _PROMPTS[id(lines)]


def test_two_tenants_never_see_each_other(vllm_server: LiveServer, tmp_path: Path, monkeypatch) -> None:
    """Tenants A and B (issue 40): A never gets B's expanded prefix or its ids; with per-tenant
    salts, B's identical prefix reports 0 cached tokens after A's requests cached it."""
    from prefixplan.gateway.tenants import hash_client_key

    _reset(vllm_server)
    model = vllm_server.served_model_name
    key_a, key_b = "sk-live-tenant-a", "sk-live-tenant-b"
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        "tenants:\n"
        f"  acme:\n    key_hashes: ['{hash_client_key(key_a)}']\n    cache_salt: salt-acme\n"
        f"  globex:\n    key_hashes: ['{hash_client_key(key_b)}']\n    cache_salt: salt-globex\n"
    )
    system_a = {"role": "system", "content": SYSTEMS["acme"]}
    system_b = {"role": "system", "content": SYSTEMS["globex"]}
    question = {"role": "user", "content": "Where is order 7?"}

    def post(url: str, key: str, path: str, body: dict) -> httpx.Response:
        return httpx.post(url + path, json=body, headers={"authorization": f"Bearer {key}"}, timeout=120)

    def chat(url: str, key: str, messages: list, **extra) -> httpx.Response:
        body = {"model": model, "messages": messages, "max_tokens": 1, **extra}
        return post(url, key, "/v1/chat/completions", body)

    with gateway(tmp_path, [vllm_server.url], "--tenants", str(tenants), name="gateway-tenants") as url:
        assert chat(url, key_b, [system_b, question], prefix_key="bot@v1").status_code == 200
        # A asks for B's key by name, through chat, /tokenize and the key route: 404 each time.
        assert chat(url, key_a, [question], prefix_key="bot").status_code == 404
        tok = post(url, key_a, "/tokenize", {"model": model, "messages": [question], "prefix_key": "bot@v1"})
        assert tok.status_code == 404 and "tokens" not in tok.text
        shown = httpx.get(url + "/v1/prefix_keys/bot@v1", headers={"authorization": f"Bearer {key_a}"}, timeout=10)
        assert shown.status_code == 404
        # A's own bot@v1: its expansion is A's prefix, never B's.
        assert chat(url, key_a, [system_a, question], prefix_key="bot@v1").status_code == 200
        ids_a = post(url, key_a, "/tokenize", {"model": model, "messages": [question], "prefix_key": "bot"}).json()[
            "tokens"
        ]
        ids_b = post(url, key_b, "/tokenize", {"model": model, "messages": [question], "prefix_key": "bot"}).json()[
            "tokens"
        ]
        full_a = _tokenize(vllm_server.url, {"model": model, "messages": [system_a, question]})
        full_b = _tokenize(vllm_server.url, {"model": model, "messages": [system_b, question]})
        assert ids_a == full_a and ids_b == full_b and ids_a != ids_b
        # Salts: the same prefix cached under A's salt gives B nothing; B's own second request hits.
        shared = [{"role": "system", "content": SYSTEMS["initech"]}, question]
        cached = []
        for key in (key_a, key_a, key_b, key_b):
            r = chat(url, key, shared)
            assert r.status_code == 200
            cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
        block = vllm_server.block_size
        assert cached[0] == 0 and cached[1] >= block, cached
        assert cached[2] == 0, cached  # B's identical prefix: nothing of A's cache
        assert cached[3] == cached[1], cached
        # Control: A's blocks are still resident; only the salt kept B from them.
        direct = httpx.post(
            vllm_server.url + "/v1/chat/completions",
            json={"model": model, "messages": shared, "max_tokens": 1, "cache_salt": "salt-acme"},
            timeout=120,
        ).json()
        assert direct["usage"]["prompt_tokens_details"]["cached_tokens"] == cached[1]
    _summary("gateway_tenants", {"cached_tokens_a_a_b_b": cached, "ids_a": len(ids_a), "ids_b": len(ids_b)})


def test_two_gateways_share_ready_state_through_redis(
    vllm_server: LiveServer, second_replica, tmp_path: Path, fresh_redis: str
) -> None:
    replica2, _ = second_replica
    _reset(vllm_server, replica2)
    model = vllm_server.served_model_name
    system = {"role": "system", "content": SYSTEMS["globex"]}
    reps = [vllm_server.url, replica2.url]
    with (
        gateway(tmp_path, reps, "--state", fresh_redis, name="gw-one") as one,
        gateway(tmp_path, reps, "--state", fresh_redis, "--no-warm", name="gw-two") as two,
    ):
        _client(one).chat.completions.create(
            model=model,
            messages=[system, {"role": "user", "content": "Berlin to Prague?"}],
            max_tokens=1,
            extra_body={"prefix_key": "globex@v1"},
        )
        assert _wait_status(one, "globex@v1")["status"] == "ready"
        seen_by_two = httpx.get(two + "/v1/prefix_keys/globex@v1", timeout=10).json()
        assert seen_by_two["status"] == "ready" and seen_by_two["replicas"] == {"r0": "verified", "r1": "verified"}
        r = _client(two).chat.completions.with_raw_response.create(
            model=model,
            messages=[{"role": "user", "content": "Paris to Lyon?"}],
            max_tokens=1,
            extra_body={"prefix_key": "globex"},
        )
        assert r.headers["x-prefixplan-key"] == "globex@v1" and r.headers["x-prefixplan-route"] == "affinity"
        assert r.parse().usage.prompt_tokens_details.cached_tokens >= 2 * vllm_server.block_size


class _KillingProxy:
    """Fault injection: a TCP proxy in front of a real vLLM that SIGKILLs it (its process group)
    when a warm-up request (``POST /v1/completions``) arrives, then drops the connection."""

    def __init__(self, target_port: int, pid: int) -> None:
        self.target_port = target_port
        self.pid = pid
        self.port = _free_port()
        self.killed = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.started = threading.Event()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self.started.set()
        self.loop.run_forever()
        server.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, inspect: bool) -> None:
        try:
            while data := await reader.read(65536):
                if inspect and b"POST /v1/completions" in data:
                    os.killpg(os.getpgid(self.pid), signal.SIGKILL)
                    self.killed.set()
                    writer.close()
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ProcessLookupError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_w, True), self._pipe(up_r, writer, False))
        writer.close()

    def __enter__(self) -> _KillingProxy:
        self.thread.start()
        self.started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def test_replica_killed_mid_warm_leaves_the_key_partial(
    vllm_server: LiveServer, second_replica, tmp_path: Path
) -> None:
    """Runs last: it kills replica 2 (the module's own server)."""
    replica2, pid = second_replica
    _reset(vllm_server, replica2)
    model = vllm_server.served_model_name
    port2 = int(replica2.url.rsplit(":", 1)[1])
    system = {"role": "system", "content": SYSTEMS["initech"]}
    with (
        _KillingProxy(port2, pid) as proxy,
        gateway(tmp_path, [vllm_server.url, f"http://127.0.0.1:{proxy.port}"]) as url,
    ):
        client = _client(url)
        r = client.chat.completions.with_raw_response.create(
            model=model,
            messages=[system, {"role": "user", "content": "def f(): pass"}],
            max_tokens=1,
            extra_body={"prefix_key": "review@v1"},
        )
        assert r.headers["x-prefixplan-registered"] == "review@v1 registered"
        state = _wait_status(url, "review@v1")
        assert proxy.killed.is_set()
        assert state["status"] == "partial" and state["replicas"]["r0"] == "verified"
        assert state["replicas"]["r1"] == "failed", state
        # Never ready, never routed by affinity: keyed requests still work (expanded, served by r0).
        for i in range(3):
            k = client.chat.completions.with_raw_response.create(
                model=model,
                messages=[{"role": "user", "content": f"def g{i}(): pass"}],
                max_tokens=1,
                extra_body={"prefix_key": "review"},
            )
            assert k.headers["x-prefixplan-route"] != "affinity" and k.headers["x-prefixplan-replica"] == "r0"
        assert httpx.get(f"{url}/v1/prefix_keys/review@v1", timeout=10).json()["status"] == "partial"
        metrics = httpx.get(url + "/metrics", timeout=10).text
        assert 'prefixplan_gateway_keys_ready{key="review@v1"} 0.0' in metrics
    _summary("gateway_killed_mid_warm", {"status": state["status"], "replicas": state["replicas"]})
