"""``prefixplan gateway`` operations: retries and faults (fault-injecting fake replicas), client
disconnects, two-phase readiness, shared state through a real redis-server, metrics, lazy imports.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

pytest.importorskip("starlette")
openai = pytest.importorskip("openai")

from prefixplan.engines.endpoint import Endpoint  # noqa: E402
from prefixplan.gateway.config import GatewayConfig  # noqa: E402
from prefixplan.gateway.prefix import WirePart, wire_hash  # noqa: E402
from prefixplan.gateway.state import KeyVersion  # noqa: E402
from prefixplan.gateway.tenants import OPEN  # noqa: E402
from prefixplan.routing.policies import RouterConfig  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import redis_fixture  # noqa: E402
from fake_engine import FakeEngine, free_port_url  # noqa: E402
from gateway_harness import gateway_of, running_gateway, wait_for  # noqa: E402

redis_url = redis_fixture.redis_url  # the fixtures, by name
fresh_redis = redis_fixture.fresh_redis

SYSTEM = {"role": "system", "content": "You are the Acme support bot. Answer briefly and precisely.\n" * 12}
RR = RouterConfig(policy="round-robin")


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def _chat(url: str, messages: list, key: str | None = None, **kw):
    extra = {"prefix_key": key} if key is not None else None
    return _client(url).chat.completions.with_raw_response.create(
        model="fake-model", messages=messages, max_tokens=2, extra_body=extra, **kw
    )


def _config(tmp_path: Path, *urls: str, **kw) -> GatewayConfig:
    eps = tuple(Endpoint(u, name=f"r{i}") for i, u in enumerate(urls))
    kw.setdefault("warm", False)
    kw.setdefault("router", RR)
    return GatewayConfig(endpoints=eps, db=str(tmp_path / "gw.db"), **kw)


@pytest.mark.parametrize("fault", ["http500", "refused", "slow"])
def test_a_failing_replica_is_retried_on_another(tmp_path: Path, fault: str) -> None:
    with FakeEngine(fault=None if fault == "refused" else fault, delay=5.0) as bad, FakeEngine() as good:
        first = free_port_url() if fault == "refused" else bad.url
        config = _config(tmp_path, first, good.url, timeout=1.0 if fault == "slow" else 30.0)
        with running_gateway(config) as (url, _):
            r = _chat(url, [{"role": "user", "content": "hi"}])
            assert r.headers["x-prefixplan-replica"] == "r1"
            assert r.parse().usage.prompt_tokens > 0
            kind = {"http500": "http_5xx", "refused": "refused", "slow": "timeout"}[fault]
            assert (
                f'prefixplan_gateway_upstream_errors_total{{kind="{kind}",replica="r0"}} 1.0'
                in httpx.get(url + "/metrics").text
            )


def test_a_stream_is_retried_before_it_started_and_all_down_is_502(tmp_path: Path) -> None:
    with FakeEngine(fault="http500") as bad, FakeEngine() as good:
        with running_gateway(_config(tmp_path, bad.url, good.url)) as (url, _):
            stream = _client(url).chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
            )
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            assert text == "xxx"
    with FakeEngine(fault="http500") as a, FakeEngine(fault="http500") as b:
        with running_gateway(_config(tmp_path, a.url, b.url, retries=1)) as (url, _):
            with pytest.raises(openai.APIStatusError) as err:
                _chat(url, [{"role": "user", "content": "hi"}])
            assert err.value.status_code == 502 and err.value.body["code"] == "upstream_unavailable"
            # The answer names each replica tried and why it failed.
            message = err.value.body["message"]
            assert "r0: http_5xx: HTTP 500" in message and "r1: http_5xx: HTTP 500" in message


def test_a_replica_that_drops_mid_stream_ends_the_stream_with_an_error_event(tmp_path: Path) -> None:
    with FakeEngine(fault="cut_stream") as cut:
        with running_gateway(_config(tmp_path, cut.url)) as (url, app):
            body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as r:
                assert r.status_code == 200  # the status line was sent before the replica dropped
                events = [line for line in r.iter_lines() if line.startswith("data:")]
            assert len(events) == 2 and '"content": "x"' in events[0]
            error = json.loads(events[1][5:])["error"]
            assert error["code"] == "upstream_stream_cut" and error["message"].startswith(
                "replica r0 failed mid-stream"
            )
            metrics = httpx.get(url + "/metrics").text
            assert 'prefixplan_gateway_upstream_errors_total{kind="stream_cut",replica="r0"} 1.0' in metrics
            assert 'prefixplan_gateway_requests_total{code="502",key="-",replica="r0"} 1.0' in metrics
            assert 'code="200"' not in metrics
            wait_for(lambda: gateway_of(app).router.in_flight == [0], "the cut stream to leave the router")


def test_a_replica_echoing_its_key_in_an_error_does_not_leak_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UPSTREAM_KEY", "sk-replica-secret-1234")
    with FakeEngine(fault="echo_auth_500", api_key="sk-replica-secret-1234") as echo:
        config = GatewayConfig(
            endpoints=(Endpoint(echo.url, name="r0", api_key_env="UPSTREAM_KEY"),),
            db=str(tmp_path / "gw.db"),
            warm=False,
            retries=0,
        )
        with running_gateway(config) as (url, _):
            with pytest.raises(openai.APIStatusError) as err:
                _chat(url, [{"role": "user", "content": "hi"}])
            message = err.value.body["message"]
            assert "r0: http_5xx: HTTP 500" in message and "rejected credentials Bearer ***" in message
            assert "sk-replica-secret" not in message


def test_a_client_disconnect_cancels_the_upstream_request(tmp_path: Path) -> None:
    with FakeEngine(fault="slow", delay=30.0) as slow:
        with running_gateway(_config(tmp_path, slow.url)) as (url, app):
            gw = gateway_of(app)
            body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(url + "/v1/chat/completions", json=body, timeout=httpx.Timeout(30, read=0.5))
            # The request is no longer in flight at the gateway long before the replica would answer.
            wait_for(lambda: gw.router.in_flight == [0], "the cancelled request to leave the router", limit=10)


def test_new_versions_are_ready_only_when_every_replica_verified(tmp_path: Path) -> None:
    with FakeEngine() as a, FakeEngine(die_after=0) as dying:
        config = _config(tmp_path, a.url, dying.url, warm=True, router=RouterConfig())
        with running_gateway(config) as (url, app):
            r = _chat(url, [SYSTEM, {"role": "user", "content": "q"}], key="bot@v1")
            assert r.headers["x-prefixplan-registered"] == "bot@v1 registered"  # served at once
            wait_for(lambda: httpx.get(url + "/v1/prefix_keys/bot@v1").json()["status"] != "warming", "the warm")
            state = httpx.get(url + "/v1/prefix_keys/bot@v1").json()
            assert state["status"] == "partial" and state["replicas"] == {"r0": "verified", "r1": "failed"}
            assert gateway_of(app).router.ready_replicas("bot@v1") == frozenset()
            routed = _chat(url, [{"role": "user", "content": "q2"}], key="bot@v1")
            assert routed.headers["x-prefixplan-route"] != "affinity"
    with FakeEngine() as a, FakeEngine() as b:
        config = _config(tmp_path, a.url, b.url, warm=True, router=RouterConfig())
        config = replace(config, db=str(tmp_path / "gw2.db"))
        with running_gateway(config) as (url, app):
            _chat(url, [SYSTEM, {"role": "user", "content": "q"}], key="bot@v1")
            wait_for(lambda: httpx.get(url + "/v1/prefix_keys/bot@v1").json()["status"] == "ready", "ready")
            picks = {
                _chat(url, [{"role": "user", "content": f"q{i}"}], key="bot").headers["x-prefixplan-replica"]
                for i in range(4)
            }
            assert picks == {"r0", "r1"}  # affinity: least loaded among the verified, in turn
            assert 'prefixplan_gateway_keys_ready{key="bot@v1"} 1.0' in httpx.get(url + "/metrics").text


def test_redis_registration_is_atomic(fresh_redis: str) -> None:
    from prefixplan.gateway.redis_state import RedisBackend

    backends = [RedisBackend(fresh_redis) for _ in range(8)]
    results = []

    def register(i: int) -> None:
        parts = (WirePart("system", f"prompt {i}"),)
        h = wire_hash(parts)
        results.append(backends[i].register(KeyVersion("bot", 1, h, h, parts)))

    threads = [threading.Thread(target=register, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    created = [kv for kv, new in results if new]
    assert len(created) == 1
    assert {kv.wire_hash for kv, _ in results} == {created[0].wire_hash}
    # A newer version supersedes the active one, with its retention.
    parts = (WirePart("system", "v2"),)
    kv2, new = backends[0].register(KeyVersion("bot", 2, wire_hash(parts), wire_hash(parts), parts))
    assert new and kv2.status == "active"
    old = backends[1].get(OPEN, "bot", 1)
    assert old is not None and old.status == "superseded" and old.retain_until is not None
    assert backends[1].get(OPEN, "bot", None).version == 2 and backends[1].last_version(OPEN, "bot") == 2
    for b in backends:
        b.close()


def test_two_gateways_share_ready_state_through_redis(tmp_path: Path, fresh_redis: str) -> None:
    with FakeEngine() as a, FakeEngine() as b:
        base = _config(tmp_path, a.url, b.url, warm=True, router=RouterConfig(), state=fresh_redis)
        one = replace(base, db=str(tmp_path / "one.db"))
        two = replace(base, db=str(tmp_path / "two.db"), warm=False)
        with running_gateway(one) as (url1, _), running_gateway(two) as (url2, app2):
            r = _chat(url1, [SYSTEM, {"role": "user", "content": "q"}], key="bot@v1")
            assert r.headers["x-prefixplan-registered"] == "bot@v1 registered"
            wait_for(lambda: httpx.get(url1 + "/v1/prefix_keys/bot@v1").json()["status"] == "ready", "ready on one")
            # Gateway two never saw the prefix: it expands the key from Redis and routes by affinity.
            state2 = httpx.get(url2 + "/v1/prefix_keys/bot@v1").json()
            assert state2["status"] == "ready" and state2["replicas"] == {"r0": "verified", "r1": "verified"}
            r2 = _chat(url2, [{"role": "user", "content": "only the key"}], key="bot")
            assert r2.headers["x-prefixplan-key"] == "bot@v1" and r2.headers["x-prefixplan-route"] == "affinity"
            assert gateway_of(app2).router.ready_replicas("bot@v1") == frozenset({0, 1})
            sent = [body for _, p, body, _ in a.requests + b.requests if p == "/v1/chat/completions"]
            assert sent[-1]["messages"][0] == SYSTEM
            # A conflicting registration on two is refused with what one registered.
            with pytest.raises(openai.ConflictError):
                _chat(url2, [{"role": "system", "content": "other"}, {"role": "user", "content": "q"}], key="bot@v1")


def test_help_does_not_import_the_gateway_stack() -> None:
    code = (
        "import sys, json, contextlib, io\n"
        "from prefixplan.cli.app import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
        "print(json.dumps(sorted(m for m in ('starlette', 'uvicorn', 'prometheus_client', 'redis', 'httpx') "
        "if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_a_single_replica_is_tried_again_when_it_is_the_only_one(tmp_path: Path) -> None:
    with FakeEngine(fault="flaky500", flaky=1) as only:
        with running_gateway(_config(tmp_path, only.url)) as (url, _):
            r = _chat(url, [{"role": "user", "content": "hi"}])
            assert r.headers["x-prefixplan-replica"] == "r0" and r.parse().usage.prompt_tokens > 0
            assert sum(1 for _, p, _, _ in only.requests if p == "/v1/chat/completions") == 2


def test_replica_keys_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UPSTREAM_KEY", "sk-replica-secret")
    with FakeEngine(api_key="sk-replica-secret") as guarded:
        config = GatewayConfig(
            endpoints=(Endpoint(guarded.url, name="r0", api_key_env="UPSTREAM_KEY"),), db=str(tmp_path / "gw.db")
        )
        with running_gateway(config) as (url, _):
            assert _chat(url, [{"role": "user", "content": "hi"}]).parse().usage.prompt_tokens > 0
            assert "sk-replica-secret" not in httpx.get(url + "/metrics").text
        (_, _, _, headers) = next(r for r in guarded.requests if r[1] == "/v1/chat/completions")
        assert headers["authorization"] == "Bearer sk-replica-secret"
