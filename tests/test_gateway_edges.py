"""``prefixplan gateway`` at its edges: malformed shapes (G4), slow and stalled clients (G5), replicas
that echo credentials (G7), a key state that is wiped or replaced under it (G8), and a seeded fuzz
of request shapes (never a 500, never a traceback).
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

pytest.importorskip("starlette")

from prefixplan.engines.endpoint import Endpoint
from prefixplan.gateway.config import GatewayConfig

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import redis_fixture  # noqa: E402
from fake_engine import FakeEngine  # noqa: E402
from gateway_harness import free_port, gateway_of, running_gateway, wait_for  # noqa: E402

SYSTEM = {"role": "system", "content": "You are the Acme support bot. Answer briefly.\n" * 10}


@pytest.fixture
def one(tmp_path: Path):
    with FakeEngine() as e:
        yield GatewayConfig(endpoints=(Endpoint(e.url, name="a"),), db=str(tmp_path / "gw.db"), warm=False), e


def _post(url: str, body: object, path: str = "/v1/chat/completions", **kw) -> httpx.Response:
    content = body if isinstance(body, bytes) else _json(body)
    return httpx.post(url + path, content=content, headers={"content-type": "application/json"}, timeout=30, **kw)


# -- G4: every malformed shape is a 400 ------------------------------------------------------------------
class _Raw(str):
    """JSON text put into a body as is (json.dumps cannot write what is nested 1,000 deep)."""


def _nested(depth: int) -> _Raw:
    return _Raw("[" * depth + '"x"' + "]" * depth)


def _json(value: object) -> str:
    """``json.dumps`` that writes :class:`_Raw` values verbatim."""
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k) + ":" + _json(v) for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_json(v) for v in value) + "]"
    return json.dumps(value, allow_nan=False)


MALFORMED = [
    {"model": "m", "messages": ["hi"]},
    {"model": "m", "messages": [5]},
    {"model": "m", "messages": [None]},
    {"model": "m", "messages": [{"content": "no role"}]},
    {"model": "m", "messages": [{"role": "user", "content": 5}]},
    {"model": "m", "messages": [{"role": "user", "content": ["not a part"]}]},
    {"model": "m", "messages": 5, "prefix_key": "bot"},
    {"model": "m", "messages": "hi", "prefix_key": "bot"},
    {"model": "m", "messages": {"role": "user"}, "prefix_key": "bot"},
    {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": "all"},
    {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [1]},
    {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"},
    {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream_options": []},
    *(
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": _nested(d)}]}]}
        for d in (254, 255, 700, 1020)
    ),
    *({"model": "m", "messages": [{"role": "user", "content": "x"}], "metadata": _nested(d)} for d in (254, 300)),
]


def test_g4_malformed_shapes_are_400_and_never_forwarded(one) -> None:
    config, engine = one
    with running_gateway(config) as (url, _):
        for body in MALFORMED:
            r = _post(url, body)
            assert r.status_code == 400, (r.status_code, r.text[:200], json.dumps(body)[:120])
            assert "Traceback" not in r.text and r.json()["error"]["type"] == "invalid_request_error"
        for prompt in ({"a": 1}, [1, "x"], [[1], "x"], 5, None):
            r = _post(url, {"model": "m", "prompt": prompt}, "/v1/completions")
            assert r.status_code == 400, prompt
        assert _post(url, b"[1, 2]").status_code == 400
        assert _post(url, b"{not json").status_code == 400
    assert [p for m, p, _, _ in engine.requests if m == "POST"] == []


# -- G5: slow clients are cut off --------------------------------------------------------------------------
def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_g5_slow_headers_are_cut(one) -> None:
    config, _ = one
    with running_gateway(replace(config, header_timeout_s=0.5)) as (url, _):
        with socket.create_connection(("127.0.0.1", _port(url)), timeout=30) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            closed = False
            for _ in range(200):  # a byte every 0.1 s: far longer than the header timeout
                try:
                    s.sendall(b"X")
                    s.settimeout(0.1)
                    if s.recv(1024) == b"":
                        closed = True
                        break
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
                    break
            assert closed, "the connection was still open after 20 s of trickled headers"


def test_g5_a_trickled_body_gets_408_and_uploads_are_capped(one) -> None:
    config, _engine = one
    with running_gateway(replace(config, body_timeout_s=0.5, max_bodies_in_flight=2)) as (url, app):
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        stalled = [socket.create_connection(("127.0.0.1", _port(url)), timeout=30) for _ in range(2)]
        try:
            for s in stalled:
                s.sendall(head + b'{"model": "m", ')
            wait_for(lambda: gateway_of(app).proxy.bodies.in_flight == 2, "two bodies in flight")
            busy = _post(url, {"model": "m", "messages": [{"role": "user", "content": "x"}]})
            assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
            assert busy.json()["error"]["code"] == "too_many_uploads"
            for s in stalled:
                s.settimeout(30)
                answer = s.recv(65536)
                assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
                assert b"request_timeout" in answer
        finally:
            for s in stalled:
                s.close()
        ok = _post(url, {"model": "m", "messages": [{"role": "user", "content": "x"}]})
        assert ok.status_code == 200  # the slots were given back


# -- G7: a replica echoing the gateway's credentials --------------------------------------------------------
@pytest.mark.parametrize("fault", ["echo_auth_200", "echo_auth_400", "echo_auth_stream"])
def test_g7_replica_credentials_are_redacted_whatever_the_status(tmp_path: Path, monkeypatch, fault: str) -> None:
    secret = "sk-replica-secret-7f3a9c1e5b"
    monkeypatch.setenv("REPLICA_KEY", secret)
    with FakeEngine(fault=fault) as e:
        config = GatewayConfig(
            endpoints=(Endpoint(e.url, name="a", api_key_env="REPLICA_KEY"),), db=str(tmp_path / "gw.db"), warm=False
        )
        with running_gateway(config) as (url, _):
            body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": fault.endswith("stream")}
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as r:
                raw = b"".join(r.iter_raw())
                headers = dict(r.headers)
            assert secret.encode() not in raw and secret not in json.dumps(headers)
            assert b"***" in raw
            assert r.status_code == (400 if fault == "echo_auth_400" else 200)
    seen = [h.get("authorization") for m, p, _, h in e.requests if m == "POST"]
    assert seen and all(s == f"Bearer {secret}" for s in seen)  # the replica did get it


def test_g7_stream_redaction_holds_back_only_a_possible_key_start() -> None:
    from prefixplan.gateway.upstream import Redactor

    r = Redactor(["SECRETKEY"])
    assert r.feed(b"data: hello\n\n") == b"data: hello\n\n"  # nothing held: the stream is not delayed
    out = r.feed(b"data: SECR") + r.feed(b"ETKEY tail\n\n") + r.flush()
    assert out == b"data: *** tail\n\n"
    assert r.feed(b"ends with SEC") == b"ends with " and r.flush() == b"SEC"


# -- G8: a key state that is lost under the gateway -----------------------------------------------------------
class _Redis:
    """A redis-server we can restart empty, on the same port (the non-persistent restart)."""

    def __init__(self, workdir: Path) -> None:
        self.exe = shutil.which("redis-server")
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        import redis

        assert self.exe is not None
        self.proc = subprocess.Popen(
            [
                self.exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        wait_for(lambda: _pings(client), "redis-server to start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def _pings(client) -> bool:
    import redis

    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def _chat(url: str, key: str, system: str | None = None) -> httpx.Response:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": "x"}]
    return _post(url, {"model": "m", "messages": messages, "prefix_key": key})


def test_g8_a_redis_restarted_empty_is_noticed_and_healed(tmp_path: Path, redis_url: str) -> None:
    server = _Redis(tmp_path)
    server.start()
    try:
        with FakeEngine() as e:
            config = GatewayConfig(
                endpoints=(Endpoint(e.url, name="a"),),
                db=str(tmp_path / "gw.db"),
                state=server.url,
                warm=False,
                state_refresh_s=3600,  # only the request path notices here
            )
            with running_gateway(config) as (url, app):
                assert _chat(url, "bot@v1", SYSTEM["content"]).status_code == 200
                server.stop()
                server.start()  # empty: no epoch, no keys
                e.requests.clear()
                r = _chat(url, "bot")  # the gateway notices and puts bot@v1 back
                assert r.status_code == 200 and r.headers["x-prefixplan-key"] == "bot@v1"
                (sent,) = [b for m, p, b, _ in e.requests if m == "POST"]
                assert sent["messages"][0] == SYSTEM
                other = _chat(url, "bot@v1", "other content")
                assert other.status_code == 409 and "registered with other content" in other.json()["error"]["message"]
                g = gateway_of(app)
                assert g.watch.resets == 1
                metrics = httpx.get(url + "/metrics").text
                assert "prefixplan_gateway_state_resets_total 1.0" in metrics
                events = [row["event"] for row in g.backend.audit_rows()]
                assert events == ["state_lost"]  # the registration's entry went with the old state
                assert _chat(url, "bot@v2", "new content").status_code == 200
            # A gateway started after the wipe, with a second wipe in between: the local ledger knows.
            server.stop()
            server.start()
            with running_gateway(config) as (url, app):
                other = _chat(url, "bot@v2", "yet other content")
                assert other.status_code == 409
                assert _chat(url, "bot").headers["x-prefixplan-key"] == "bot@v2"
    finally:
        server.stop()


def test_g8_a_store_replaced_under_the_gateway_is_noticed(tmp_path: Path) -> None:
    with FakeEngine() as e:
        db = tmp_path / "gw.db"
        config = GatewayConfig(endpoints=(Endpoint(e.url, name="a"),), db=str(db), warm=False, state_refresh_s=0.05)
        with running_gateway(config) as (url, app):
            assert _chat(url, "bot@v1", SYSTEM["content"]).status_code == 200
            for suffix in ("", "-wal", "-shm"):
                Path(str(db) + suffix).unlink(missing_ok=True)
            g = gateway_of(app)
            wait_for(lambda: g.watch.resets == 1, "the gateway to notice the replaced store")
            r = _chat(url, "bot@v1", "other content")
            assert r.status_code == 409
            assert _chat(url, "bot").headers["x-prefixplan-key"] == "bot@v1"


# -- fuzz: request shapes ---------------------------------------------------------------------------------------
def _fuzz_value(rng: random.Random, depth: int = 0) -> object:
    kinds = ["str", "int", "none", "bool", "float", "list", "dict", "deep", "unicode", "big"]
    kind = rng.choice(kinds if depth < 3 else kinds[:5])
    if kind == "str":
        return rng.choice(["", "x", "system", "user", "bot@v1", "bot", "@", "a@v0", " \n"])
    if kind == "int":
        return rng.choice([0, -1, 5, 2**31, 10**30])
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "float":
        return rng.choice([0.5, -1e308, 1e308])
    if kind == "list":
        return [_fuzz_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "dict":
        keys = ["role", "content", "name", "tool_calls", "type", "text", "function"]
        return {rng.choice(keys): _fuzz_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    if kind == "deep":
        return _nested(rng.choice([60, 63, 64, 65, 200, 254, 255, 256, 900]))
    if kind == "unicode":
        return rng.choice(["\ud800", "é\u0000\u202e", "🙂" * 50])
    return "z" * rng.choice([10_000, 200_000])


def _fuzz_body(rng: random.Random) -> object:
    base: dict = {
        "model": "m",
        "messages": [dict(SYSTEM), {"role": "user", "content": "hello"}],
        "max_tokens": 2,
    }
    if rng.random() < 0.5:
        base["prefix_key"] = rng.choice(["bot", "bot@v1", "bot@v2", "other@v1"])
    if rng.random() < 0.3:
        base["tools"] = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for _ in range(rng.randint(1, 3)):
        field = rng.choice(
            ["messages", "tools", "prompt", "prefix_key", "stream", "stream_options", "cache_salt", "extra"]
        )
        where = rng.random()
        if field == "messages" and where < 0.5:
            msgs = base["messages"]
            i = rng.randrange(len(msgs))
            if rng.random() < 0.5:
                msgs[i] = _fuzz_value(rng)
            elif isinstance(msgs[i], dict):
                msgs[i][rng.choice(["role", "content", "name", "tool_calls"])] = _fuzz_value(rng)
        else:
            base[field] = _fuzz_value(rng)
    if rng.random() < 0.1:
        return rng.choice([[], "text", 5, None])
    return base


def test_fuzz_request_shapes_never_500(tmp_path: Path) -> None:
    rng = random.Random(40)
    with FakeEngine() as e:
        config = GatewayConfig(
            endpoints=(Endpoint(e.url, name="a"),), db=str(tmp_path / "gw.db"), warm=False, retries=0
        )
        with running_gateway(config) as (url, _):
            statuses: dict[int, int] = {}
            with httpx.Client(timeout=30) as client:
                for i in range(400):
                    body = _fuzz_body(rng)
                    path = rng.choice(["/v1/chat/completions", "/v1/completions", "/tokenize"])
                    content = _json(body)
                    r = client.post(url + path, content=content.encode("utf-8", "surrogatepass"))
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                    assert r.status_code < 500 or r.status_code == 502, (i, r.status_code, r.text[:300])
                    assert "Traceback" not in r.text
    assert statuses.get(400, 0) > 50 and statuses.get(200, 0) > 20, statuses


redis_url = redis_fixture.redis_url
