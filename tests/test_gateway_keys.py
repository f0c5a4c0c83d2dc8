"""``prefixplan gateway``: prefix_key expansion and registration (404/409/410), recipes at start,
client keys, size limits; through real HTTP (uvicorn) with the openai SDK as the client.

The replicas here are tests/fake_engine.py servers: the key rules answer before any replica is
asked, and the fake records what the gateway forwarded. The same flow on a real vLLM (token ids
equal, cached tokens) is tests/live/test_gateway_live.py.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("starlette")
openai = pytest.importorskip("openai")

from prefixplan.engines.endpoint import Endpoint  # noqa: E402
from prefixplan.errors import KeyConflictError  # noqa: E402
from prefixplan.gateway.config import GatewayConfig, client_key_hashes  # noqa: E402
from prefixplan.gateway.prefix import (  # noqa: E402
    WirePart,
    diff_summary,
    expand_chat,
    recipe_parts,
    request_parts,
    wire_hash,
)
from prefixplan.gateway.state import KeyVersion, SQLiteBackend  # noqa: E402
from prefixplan.gateway.tenants import LOCK, OPEN_PRINCIPAL, hash_client_key  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from fake_engine import FakeEngine, chat_text  # noqa: E402
from gateway_harness import gateway_of, running_gateway  # noqa: E402

SYSTEM = {"role": "system", "content": "You are the Acme support bot. Answer briefly.\n" * 20}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "lookup", "description": "Find an order", "parameters": {"type": "object"}},
    }
]


def _client(url: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


def _chat(client: openai.OpenAI, messages: list, key: str | None = None, **kw):
    extra = {"prefix_key": key} if key is not None else None
    return client.chat.completions.with_raw_response.create(
        model="fake-model", messages=messages, max_tokens=2, extra_body=extra, **kw
    )


def _forwarded(engine: FakeEngine) -> list[dict]:
    return [b for m, p, b, _ in engine.requests if p == "/v1/chat/completions"]


@pytest.fixture
def fleet(tmp_path: Path):
    with FakeEngine() as a, FakeEngine() as b:
        config = GatewayConfig(
            endpoints=(Endpoint(a.url, name="a"), Endpoint(b.url, name="b")), db=str(tmp_path / "gw.db"), warm=False
        )
        yield config, a, b


def test_parts_hash_expand_and_diff() -> None:
    body = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "hi"}], "tools": TOOLS}
    parts = request_parts(body)
    assert parts is not None and [p.kind for p in parts] == ["system", "tool"]
    assert parts[1].data == json.dumps(TOOLS[0], separators=(",", ":"))
    # Expanding the key-only request gives back the full request, message for message.
    keyed = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert expand_chat(keyed, parts) == body
    assert request_parts(keyed) is None
    changed = (WirePart("system", SYSTEM["content"].replace("briefly", "kindly")), parts[1])
    assert wire_hash(changed) != wire_hash(parts)
    n_old, n_new = len(SYSTEM["content"]), len(changed[0].data)
    assert diff_summary(parts, changed) == f"system changed at character 37 ({n_old} -> {n_new} characters)"
    assert "tool[0] (lookup) removed" in diff_summary(parts, parts[:1])


def test_recipe_parts_are_what_a_request_carries() -> None:
    from prefixplan.keys.recipes import load_recipes

    (bot,) = [r for r in load_recipes(ROOT / "recipes") if r.name == "support-bot"]
    parts = recipe_parts(bot)
    assert [p.kind for p in parts] == ["system", "tool", "tool", "tool"]
    assert parts[0].data == (ROOT / "recipes/parts/support/system.md").read_text()
    tool0 = json.loads((ROOT / "recipes/parts/support/tools/lookup_order.json").read_text())
    assert json.loads(parts[1].data) == tool0  # pretty file, compact on the wire, same key order
    assert list(json.loads(parts[1].data)) == list(tool0)


def test_register_then_expand_forwards_the_full_request(fleet) -> None:
    config, a, b = fleet
    with running_gateway(config) as (url, _):
        client = _client(url)
        full = [SYSTEM, {"role": "user", "content": "Where is order 7?"}]
        r = _chat(client, full, key="acme-bot", tools=TOOLS)
        assert r.headers["x-prefixplan-key"] == "acme-bot@v1"
        assert r.headers["x-prefixplan-registered"] == "acme-bot@v1 registered"
        r2 = _chat(client, [{"role": "user", "content": "Where is order 7?"}], key="acme-bot@v1")
        assert r2.headers["x-prefixplan-key"] == "acme-bot@v1" and "x-prefixplan-registered" not in r2.headers
        sent = _forwarded(a) + _forwarded(b)
        assert len(sent) == 2
        assert sent[0]["messages"] == sent[1]["messages"] == full
        assert sent[0]["tools"] == sent[1]["tools"] == TOOLS
        assert "prefix_key" not in sent[1]
        # The replica computed the same prompt for both (the fake's chat template).
        assert r.parse().usage.prompt_tokens == r2.parse().usage.prompt_tokens == len(chat_text(full, TOOLS))
        # Same full content again: accepted, nothing registered.
        again = _chat(client, full, key="acme-bot", tools=TOOLS)
        assert "x-prefixplan-registered" not in again.headers


def test_unknown_conflict_and_backwards_versions(fleet) -> None:
    config, a, b = fleet
    with running_gateway(config) as (url, _):
        client = _client(url)
        with pytest.raises(openai.NotFoundError) as nf:
            _chat(client, [{"role": "user", "content": "x"}], key="nobody@v2")
        err = nf.value.body
        assert err["code"] == "prefix_key_not_found" and err["type"] == "invalid_request_error"
        assert "send one request with prefix_key and the full prefix" in err["message"]
        _chat(client, [SYSTEM, {"role": "user", "content": "x"}], key="bot@v1")
        edited = {"role": "system", "content": SYSTEM["content"] + "Be kind."}
        with pytest.raises(openai.ConflictError) as c1:
            _chat(client, [edited, {"role": "user", "content": "x"}], key="bot@v1")
        assert "system changed at character" in c1.value.body["message"]
        assert "send bot@v2 with the full prefix" in c1.value.body["message"]
        with pytest.raises(openai.ConflictError) as c2:  # a bare name: refused without --auto-version
            _chat(client, [edited, {"role": "user", "content": "x"}], key="bot")
        assert "--auto-version" in c2.value.body["message"]
        with pytest.raises(openai.ConflictError) as c3:  # versions grow by one: no skipping ahead
            _chat(client, [edited, {"role": "user", "content": "x"}], key="bot@v3")
        assert "versions grow by one and bot is at v1; send bot@v2" in c3.value.body["message"]
        r = _chat(client, [edited, {"role": "user", "content": "x"}], key="bot@v2")
        assert r.headers["x-prefixplan-registered"] == "bot@v2 registered"
        with pytest.raises(openai.BadRequestError) as bad:
            _chat(client, [{"role": "user", "content": "x"}], key="bot@3")
        assert bad.value.body["code"] == "invalid_prefix_key"
        assert all("@" not in json.dumps(b.get("prefix_key", "")) for b in _forwarded(a) + _forwarded(b))
        metrics = httpx.get(url + "/metrics").text
        assert 'prefixplan_gateway_key_events_total{event="conflict"} 3.0' in metrics
        assert 'prefixplan_gateway_key_events_total{event="not_found"} 1.0' in metrics


def test_auto_version_registers_the_next_version(fleet) -> None:
    from dataclasses import replace

    config, _, _ = fleet
    with running_gateway(replace(config, auto_version=True)) as (url, _):
        client = _client(url)
        _chat(client, [SYSTEM, {"role": "user", "content": "x"}], key="bot")
        edited = {"role": "system", "content": "Short prompt."}
        r = _chat(client, [edited, {"role": "user", "content": "x"}], key="bot")
        assert r.headers["x-prefixplan-key"] == "bot@v2"
        assert r.headers["x-prefixplan-registered"].startswith("bot@v2 registered: the prefix differs from bot@v1")
        # The bare name now expands to v2; v1 is superseded but within its retention.
        assert _chat(client, [{"role": "user", "content": "y"}], key="bot").headers["x-prefixplan-key"] == "bot@v2"
        assert _chat(client, [{"role": "user", "content": "y"}], key="bot@v1").headers["x-prefixplan-key"] == "bot@v1"


def test_expired_version_is_gone(fleet) -> None:
    config, _, _ = fleet
    day = 86400.0
    past = time.time() - 10 * day  # registered ten days ago, superseded at once: 7 days retention are over
    backend = SQLiteBackend(config.db, clock=lambda: past)
    for version, text in ((1, "old prompt"), (2, "new prompt")):
        parts = (WirePart("system", text),)
        h = wire_hash(parts)
        backend.register(KeyVersion("bot", version, h, h, parts, retain_seconds=int(7 * day)))
    backend.close()
    with running_gateway(config) as (url, _):
        client = _client(url)
        with pytest.raises(openai.APIStatusError) as gone:
            _chat(client, [{"role": "user", "content": "x"}], key="bot@v1")
        assert gone.value.status_code == 410
        body = gone.value.body
        assert (
            body["code"] == "prefix_key_expired" and "send prefix_key 'bot' for the active version" in body["message"]
        )
        assert _chat(client, [{"role": "user", "content": "x"}], key="bot").headers["x-prefixplan-key"] == "bot@v2"


def test_locked_recipes_are_registered_at_start(tmp_path: Path) -> None:
    from dataclasses import replace

    with FakeEngine() as a:
        config = GatewayConfig(
            endpoints=(Endpoint(a.url, name="a"),),
            db=str(tmp_path / "gw.db"),
            recipes=str(ROOT / "recipes"),
            lock=str(ROOT / "prefixplan.lock"),
            warm=False,
        )
        with running_gateway(config) as (url, _):
            r = _chat(_client(url), [{"role": "user", "content": "Where is my order?"}], key="support-bot")
            assert r.headers["x-prefixplan-key"] == "support-bot@v3"
            (sent,) = _forwarded(a)
            assert sent["messages"][0]["content"] == (ROOT / "recipes/parts/support/system.md").read_text()
            assert [t["function"]["name"] for t in sent["tools"]] == [
                "lookup_order",
                "create_return",
                "escalate_to_human",
            ]
            state = httpx.get(url + "/v1/prefix_keys/support-bot@v3").json()
            assert state["source"] == "recipe" and state["content_hash"].startswith("pp1:sha256:")
        # A recipe that differs from the lock is refused at start: CI's check, at run time.
        lock = tmp_path / "prefixplan.lock"
        text = (ROOT / "prefixplan.lock").read_text()
        first = text.index("hash: pp1:sha256:") + len("hash: pp1:sha256:")
        lock.write_text(text[:first] + ("0" if text[first] != "0" else "1") + text[first + 1 :])
        from prefixplan.gateway.app import locked_versions

        with pytest.raises(KeyConflictError, match="differs from its lock entry"):
            locked_versions(replace(config, lock=str(lock)))


def test_client_keys_and_body_limit(fleet) -> None:
    from dataclasses import replace

    config, _, _ = fleet
    hashes = client_key_hashes([hash_client_key("sk-team-a")])
    with running_gateway(replace(config, client_key_hashes=hashes, max_body_bytes=4096)) as (url, _):
        with pytest.raises(openai.AuthenticationError) as denied:
            _chat(_client(url, "sk-wrong"), [{"role": "user", "content": "x"}])
        assert denied.value.body["code"] == "invalid_api_key"
        ok = _chat(_client(url, "sk-team-a"), [{"role": "user", "content": "x"}])
        assert ok.parse().usage.prompt_tokens > 0
        assert httpx.get(url + "/healthz").status_code == 200  # health checks need no key
        with pytest.raises(openai.APIStatusError) as big:
            _chat(_client(url, "sk-team-a"), [{"role": "user", "content": "x" * 5000}])
        assert big.value.status_code == 413 and big.value.body["code"] == "request_too_large"


def test_client_keys_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_KEYS", "k1, k2")
    assert client_key_hashes([], "GW_KEYS") == {hash_client_key("k1"), hash_client_key("k2")}
    from prefixplan.errors import UsageError

    with pytest.raises(UsageError, match="GW_UNSET"):
        client_key_hashes([], "GW_UNSET")
    with pytest.raises(UsageError, match="expected sha256"):
        client_key_hashes(["md5:abc"])


def test_stats_reach_the_store(fleet, capsys: pytest.CaptureFixture[str]) -> None:
    from dataclasses import replace

    from prefixplan.store import open_store

    config, _, _ = fleet
    with running_gateway(replace(config, stats_interval_s=3600)) as (url, app):
        client = _client(url)
        _chat(client, [SYSTEM, {"role": "user", "content": "x"}], key="bot")
        for q in ("a", "b"):
            _chat(client, [{"role": "user", "content": q}], key="bot")
        stream = client.chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": "s"}],
            max_tokens=2,
            stream=True,
            extra_body={"prefix_key": "bot"},
        )
        chunks = list(stream)
        assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0
        assert gateway_of(app).router.in_flight == [0, 0]
    with open_store(config.db) as store:  # flushed at shutdown
        rows = [r for r in store.key_stats() if r.key == "bot@v1"]
    assert sum(r.requests for r in rows) == 4
    assert sum(r.prompt_tokens for r in rows) > 0 and sum(r.ttft_count for r in rows) == 4
    # prefixplan status --key-stats shows them (no endpoint needed).
    from prefixplan.cli.app import main

    capsys.readouterr()
    assert main(["status", "--key-stats", "--db", config.db, "--json", "-"]) == 0
    shown = [r for r in json.loads(capsys.readouterr().out)["keys"] if r["key"] == "bot@v1"]
    assert sum(r["requests"] for r in shown) == 4
    assert sum(r["cached_tokens"] for r in shown) == sum(r.cached_tokens for r in rows)


def test_a_locked_key_registered_with_other_content_refuses_the_start(tmp_path: Path) -> None:
    import asyncio

    from prefixplan.gateway.app import Gateway

    db = str(tmp_path / "gw.db")
    backend = SQLiteBackend(db)
    parts = (WirePart("system", "someone else's support-bot@v3"),)
    backend.register(KeyVersion("support-bot", 3, wire_hash(parts), wire_hash(parts), parts, owner=LOCK))
    config = GatewayConfig(
        endpoints=(Endpoint("http://127.0.0.1:9", name="a"),),
        db=db,
        recipes=str(ROOT / "recipes"),
        lock=str(ROOT / "prefixplan.lock"),
        warm=False,
    )
    with pytest.raises(KeyConflictError, match="support-bot@v3 is registered with hash"):
        asyncio.run(Gateway(config, backend, None).start())
    backend.close()


def test_gateway_keys_are_apart_from_the_repositorys_versions(fleet) -> None:
    from prefixplan.store import open_store

    config, _, _ = fleet
    with open_store(config.db) as store:  # e.g. registered by analyze: no parts the gateway could expand
        store.record_version("lineage", content_hash="pp1:sha256:" + "ab" * 32, kind="system", source="analysis")
    with running_gateway(config) as (url, _):
        with pytest.raises(openai.NotFoundError):  # an analysis' version is not a gateway key
            _chat(_client(url), [{"role": "user", "content": "x"}], key="lineage@v1")
        r = _chat(_client(url), [SYSTEM, {"role": "user", "content": "x"}], key="lineage@v1")
        assert r.headers["x-prefixplan-registered"] == "lineage@v1 registered"
    with open_store(config.db) as store:  # the repository's row is untouched
        (rec,) = store.versions("lineage")
        assert rec.content_hash == "pp1:sha256:" + "ab" * 32 and rec.source == "analysis"


class _FailingState(SQLiteBackend):
    """The store as a restarting Redis leaves it: every read and write raises."""

    def get(self, *args, **kw):
        raise ConnectionError("Error 111 connecting to localhost:6379. Connection refused.")

    last_version = register = warm = set_warm = name_count = get


def test_a_failing_key_state_is_a_503_naming_the_store(tmp_path: Path) -> None:
    import asyncio

    from prefixplan.gateway.rules import GatewayError, KeyService

    keys = KeyService(_FailingState(str(tmp_path / "gw.db")))
    with pytest.raises(GatewayError) as err:
        asyncio.run(keys.expand_target(OPEN_PRINCIPAL, "support@v1"))
    assert err.value.status == 503 and err.value.code == "state_unavailable"
    assert err.value.message == (
        "the gateway's key state (_FailingState) failed: ConnectionError: Error 111 connecting to localhost:6379. "
        "Connection refused."
    )
    with pytest.raises(GatewayError) as err:
        asyncio.run(keys.check_or_register(OPEN_PRINCIPAL, "support", [WirePart("system", "be brief")]))
    assert err.value.status == 503


def test_a_warm_that_raises_is_recorded_failed_not_left_warming(tmp_path: Path) -> None:
    import asyncio

    from prefixplan.gateway.warm import Warmer
    from prefixplan.store.gateway_tables import FLEET
    from prefixplan.warming.results import WarmOptions

    backend = SQLiteBackend(str(tmp_path / "gw.db"))
    kv, _ = backend.register(KeyVersion("support", 1, "h", "h", (WirePart("system", "be brief"),)))

    def broken(*args, **kw):
        raise RuntimeError("tokenizer vanished")

    done: list[tuple[str, dict]] = []
    warmer = Warmer(backend, (), WarmOptions(), warm_fn=broken, on_done=lambda k, s: done.append((k, s)))

    async def run() -> dict:
        return await warmer.schedule(kv)

    assert asyncio.run(run()) == {FLEET: "failed"}
    assert backend.warm(kv.key) == {FLEET: "failed"} and done == [(kv.key, {FLEET: "failed"})]
