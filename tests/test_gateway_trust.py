"""``prefixplan gateway`` as an attacker with one of two client keys sees it: keys have owners,
tenants cannot see or steer each other, locked keys stay what CI checked, and errors leak nothing.

Each test names the finding it guards (G1, G2, ...: docs/gateway.md "Trust"). The replicas are
tests/fake_engine.py servers that record every request the gateway forwarded, so each test checks
the attacker's view (status, message) and what reached the replicas on the other tenant's behalf.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

pytest.importorskip("starlette")

from prefixplan.engines.endpoint import Endpoint
from prefixplan.gateway.config import GatewayConfig
from prefixplan.gateway.prefix import WirePart, diff_summary
from prefixplan.gateway.tenants import hash_client_key, load_tenancy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from fake_engine import FakeEngine  # noqa: E402
from gateway_harness import gateway_of, running_gateway  # noqa: E402

KEY_A, KEY_B, KEY_C = "sk-tenant-a-0001", "sk-tenant-b-0002", "sk-reader-c-0003"
SYSTEM_A = "You are Acme's bot. Secret A: the vault code is 4417.\n" * 8
SYSTEM_B = "You are Globex's bot. Secret B: the launch date is June 9.\n" * 8
TOOL_A = {"type": "function", "function": {"name": "acme_lookup", "parameters": {"type": "object"}}}


def _tenants_file(tmp_path: Path, **extra: dict) -> Path:
    tenants = {
        "acme": {"key_hashes": [hash_client_key(KEY_A)], "cache_salt": "salt-acme"},
        "globex": {"key_hashes": [hash_client_key(KEY_B)], "share": ["globex-faq"]},
        "reader": {"key_hashes": [hash_client_key(KEY_C)], "register": False},
    }
    for name, spec in extra.items():
        tenants[name] = {**tenants.get(name, {}), **spec}
    path = tmp_path / "tenants.yaml"
    path.write_text(json.dumps({"tenants": tenants}))  # JSON is YAML
    return path


@pytest.fixture
def fleet(tmp_path: Path):
    with FakeEngine() as a, FakeEngine() as b:
        config = GatewayConfig(
            endpoints=(Endpoint(a.url, name="a"), Endpoint(b.url, name="b")),
            db=str(tmp_path / "gw.db"),
            warm=False,
            tenancy=load_tenancy(_tenants_file(tmp_path)),
        )
        yield config, a, b


def _post(url: str, key: str, body: dict, path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.post(url + path, json=body, headers={"authorization": f"Bearer {key}"}, timeout=30)


def _chat(url: str, key: str, prefix_key: str | None, *, system: str | None = None, tools=None, user="hi"):
    messages = ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": user}
    ]
    body: dict = {"model": "fake-model", "messages": messages, "max_tokens": 2}
    if tools:
        body["tools"] = tools
    if prefix_key is not None:
        body["prefix_key"] = prefix_key
    return _post(url, key, body)


def _sent(*engines: FakeEngine) -> list[dict]:
    return [b for e in engines for m, p, b, _ in e.requests if m == "POST" and b is not None]


def _fresh(*engines: FakeEngine) -> None:
    """Forget what the engines recorded so far (the next ``_sent`` is what came after)."""
    for e in engines:
        e.requests.clear()


def _leaks(engines: tuple[FakeEngine, ...], text: str, *, salt: str | None = None) -> list[dict]:
    """Forwarded requests that carry ``text`` (optionally: under another tenant's ``salt``)."""
    out = []
    for body in _sent(*engines):
        if text in json.dumps(body) and (salt is None or body.get("cache_salt") != salt):
            out.append(body)
    return out


# -- G1: another tenant cannot rewrite my key ------------------------------------------------------------
def test_g1_a_tenant_registering_my_key_name_changes_nothing_for_me(fleet) -> None:
    config, a, b = fleet
    with running_gateway(config) as (url, _):
        assert _chat(url, KEY_B, "support-bot@v1", system=SYSTEM_B).status_code == 200
        # Tenant A "registers support-bot@v2" with its own prompt and tool: its own namespace.
        r = _chat(url, KEY_A, "support-bot@v2", system=SYSTEM_A, tools=[TOOL_A])
        assert r.status_code == 409 and "versions grow by one and support-bot is at v0" in r.json()["error"]["message"]
        r = _chat(url, KEY_A, "support-bot@v1", system=SYSTEM_A, tools=[TOOL_A])
        assert r.status_code == 200 and r.headers["x-prefixplan-registered"] == "support-bot@v1 registered"
        _fresh(a, b)
        # B's bare name still expands to B's prompt, never A's.
        r = _chat(url, KEY_B, "support-bot", user="where is my order?")
        assert r.status_code == 200 and r.headers["x-prefixplan-key"] == "support-bot@v1"
        (forwarded,) = _sent(a, b)
        assert forwarded["messages"][0]["content"] == SYSTEM_B and "tools" not in forwarded
    assert not [
        body for body in _sent(a, b) if "Secret A" in json.dumps(body) and body.get("cache_salt") != "salt-acme"
    ]


def test_g1_auto_version_stays_in_the_tenants_own_namespace(fleet) -> None:
    config, a, b = fleet
    with running_gateway(replace(config, auto_version=True)) as (url, _):
        assert _chat(url, KEY_B, "bot", system=SYSTEM_B).headers["x-prefixplan-key"] == "bot@v1"
        r = _chat(url, KEY_A, "bot", system=SYSTEM_A)  # A's first bot: its own v1, not B's v2
        assert r.headers["x-prefixplan-key"] == "bot@v1" and r.headers["x-prefixplan-registered"] == "bot@v1 registered"
        r = _chat(url, KEY_A, "bot", system=SYSTEM_A + "changed")
        assert r.headers["x-prefixplan-key"] == "bot@v2"  # A's v2
        _fresh(a, b)
        assert _chat(url, KEY_B, "bot").headers["x-prefixplan-key"] == "bot@v1"
        (forwarded,) = _sent(a, b)
        assert forwarded["messages"][0]["content"] == SYSTEM_B


def test_g1_locked_keys_are_read_only_and_survive_a_restart(fleet) -> None:
    config, a, b = fleet
    config = replace(config, recipes=str(ROOT / "recipes"), lock=str(ROOT / "prefixplan.lock"))
    locked_system = (ROOT / "recipes/parts/support/system.md").read_text()
    with running_gateway(config) as (url, _):
        for ref in ("support-bot@v4", "support-bot@v3", "support-bot"):
            r = _chat(url, KEY_A, ref, system=SYSTEM_A, tools=[TOOL_A])
            err = r.json()["error"]
            assert r.status_code == 403 and err["code"] == "prefix_key_read_only", ref
            assert "locked in the repository" in err["message"] and "character" not in err["message"]
    with running_gateway(config) as (url, app):  # a restart: v3 is still the active version
        _fresh(a, b)
        r = _chat(url, KEY_B, "support-bot")
        assert r.status_code == 200 and r.headers["x-prefixplan-key"] == "support-bot@v3"
        (forwarded,) = _sent(a, b)
        assert forwarded["messages"][0]["content"] == locked_system
        audit = gateway_of(app).backend.audit_rows()
    assert not _leaks((a, b), "Secret A", salt="salt-acme")
    assert all(row["event"] != "registered" or row["tenant"] != "acme" for row in audit)


# -- G2: another tenant cannot use, read or probe my key ----------------------------------------------------
def test_g2_my_keys_are_invisible_to_other_tenants(fleet) -> None:
    config, a, b = fleet
    with running_gateway(config) as (url, _):
        assert _chat(url, KEY_B, "b-bot@v1", system=SYSTEM_B).status_code == 200
        _fresh(a, b)
        nobody = _chat(url, KEY_A, "nobody@v1").json()["error"]["message"]
        for ref in ("b-bot@v1", "b-bot"):
            r = _chat(url, KEY_A, ref)
            assert r.status_code == 404 and r.json()["error"]["message"] == nobody.replace("nobody@v1", ref)
            t = _post(url, KEY_A, {"model": "m", "prompt": "x", "prefix_key": ref}, "/tokenize")
            assert t.status_code == 404
            t = _post(
                url,
                KEY_A,
                {"model": "m", "messages": [{"role": "user", "content": "x"}], "prefix_key": ref},
                "/tokenize",
            )
            assert t.status_code == 404
        shown = httpx.get(url + "/v1/prefix_keys/b-bot@v1", headers={"authorization": f"Bearer {KEY_A}"})
        assert shown.status_code == 404
        own = httpx.get(url + "/v1/prefix_keys/b-bot@v1", headers={"authorization": f"Bearer {KEY_B}"})
        assert own.status_code == 200 and own.json()["key"] == "b-bot@v1"
        # Guessing B's prompt under B's name only ever registers A's own b-bot: no oracle.
        guess = _chat(url, KEY_A, "b-bot@v1", system=SYSTEM_B[:15])
        assert guess.status_code == 200 and guess.headers["x-prefixplan-registered"] == "b-bot@v1 registered"
        probe = _chat(url, KEY_A, "b-bot@v1", system=SYSTEM_B[:14] + "X")
        assert probe.status_code == 409 and "character" in probe.json()["error"]["message"]  # its own key
    assert _sent(a, b) and all("Secret B" not in json.dumps(x) for x in _sent(a, b))


def test_g2_shared_keys_are_read_only_and_conflicts_name_no_position(fleet) -> None:
    config, a, b = fleet
    with running_gateway(config) as (url, _):
        assert _chat(url, KEY_B, "globex-faq@v1", system=SYSTEM_B).status_code == 200
        _fresh(a, b)
        r = _chat(url, KEY_A, "globex-faq")  # shared: A may expand it
        assert r.status_code == 200 and r.headers["x-prefixplan-key"] == "globex-faq@v1"
        assert _sent(a, b)[0]["messages"][0]["content"] == SYSTEM_B
        r = _chat(url, KEY_A, "globex-faq@v1", system=SYSTEM_B[:30] + "X" + SYSTEM_B[31:])
        err = r.json()["error"]
        assert r.status_code == 403 and err["code"] == "prefix_key_read_only"
        assert "system changed" in err["message"] and "character" not in err["message"]
        r = _chat(url, KEY_A, "globex-faq@v2", system="mine")
        assert r.status_code == 403 and r.json()["error"]["code"] == "prefix_key_read_only"
        r = _chat(url, KEY_B, "globex-faq@v1", system=SYSTEM_B[:30] + "X" + SYSTEM_B[31:])
        assert r.status_code == 409 and "changed at character 30" in r.json()["error"]["message"]  # the owner


def test_g2_diff_without_positions() -> None:
    old = (WirePart("system", "abcdef"), WirePart("tool", '{"name":"t"}', True))
    new = (WirePart("system", "abcXef"), WirePart("tool", '{"name":"t"}', True))
    assert diff_summary(old, new) == "system changed at character 3 (6 -> 6 characters)"
    assert diff_summary(old, new, positions=False) == "system changed"


def test_the_register_role_can_be_withheld(fleet) -> None:
    config, _a, _b = fleet
    with running_gateway(config) as (url, _):
        assert _chat(url, KEY_B, "globex-faq@v1", system=SYSTEM_B).status_code == 200
        r = _chat(url, KEY_C, "mine@v1", system="reader's own")
        assert r.status_code == 403 and r.json()["error"]["code"] == "registration_not_allowed"
        assert _chat(url, KEY_C, "globex-faq").status_code == 200  # may use shared keys
        assert _chat(url, KEY_C, "globex-faq", system=SYSTEM_B).status_code == 200  # same content: served


def test_a_tenant_has_a_bounded_number_of_names(tmp_path: Path) -> None:
    with FakeEngine() as e:
        tenancy = load_tenancy(_tenants_file(tmp_path, acme={"max_keys": 2}))
        config = GatewayConfig(endpoints=(Endpoint(e.url),), db=str(tmp_path / "gw.db"), warm=False, tenancy=tenancy)
        with running_gateway(config) as (url, _):
            for name in ("one", "two"):
                assert _chat(url, KEY_A, name, system=name).status_code == 200
            assert _chat(url, KEY_A, "two", system="two, edited").status_code == 409  # a version, not a name
            r = _chat(url, KEY_A, "three", system="three")
            assert r.status_code == 403 and r.json()["error"]["code"] == "prefix_key_limit"
            assert _chat(url, KEY_B, "three", system="three").status_code == 200  # another tenant's budget


# -- G6: a version number cannot exhaust a name --------------------------------------------------------------
def test_g6_versions_grow_by_one(fleet) -> None:
    config, _, _ = fleet
    with running_gateway(config) as (url, _):
        r = _chat(url, KEY_A, "support-bot@v999999999", system=SYSTEM_A)
        assert r.status_code == 409 and r.json()["error"]["message"].endswith("send support-bot@v1")
        assert _chat(url, KEY_A, "support-bot@v1", system=SYSTEM_A).status_code == 200
        assert _chat(url, KEY_A, "support-bot@v2", system=SYSTEM_A + "2").status_code == 200
        r = _chat(url, KEY_A, "support-bot@v1000000000", system=SYSTEM_A)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_prefix_key"


# -- audit and salt --------------------------------------------------------------------------------------------
def test_registrations_are_audited_and_salts_set_by_the_gateway(fleet) -> None:
    config, a, b = fleet
    with running_gateway(config) as (url, app):
        body = {
            "model": "m",
            "messages": [{"role": "system", "content": SYSTEM_A}, {"role": "user", "content": "x"}],
            "prefix_key": "acme-bot@v1",
            "cache_salt": "salt-globex-guess",
        }
        assert _post(url, KEY_A, body).status_code == 200
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "cache_salt": "salt-acme"}
        assert _post(url, KEY_B, body).status_code == 200  # B names A's salt: stripped
        audit = gateway_of(app).backend.audit_rows()
    first, second = _sent(a, b)[-2:]
    assert first["cache_salt"] == "salt-acme" and "cache_salt" not in second
    (row,) = [r for r in audit if r["event"] == "registered"]
    assert row["tenant"] == "acme" and row["key"] == "acme/acme-bot@v1"
    assert row["client"] == hash_client_key(KEY_A)[7:19] and row["content_hash"].startswith("pp1:sha256:")
    assert KEY_A not in json.dumps(audit)


def test_warming_uses_the_owners_salt(tmp_path: Path) -> None:
    from prefixplan.gateway.app import Gateway
    from prefixplan.gateway.state import KeyVersion, SQLiteBackend

    tenancy = load_tenancy(_tenants_file(tmp_path))
    config = GatewayConfig(endpoints=(Endpoint("http://127.0.0.1:9"),), db=str(tmp_path / "gw.db"), tenancy=tenancy)
    gw = Gateway(config, SQLiteBackend(config.db), None)
    parts = (WirePart("system", "x"),)
    assert gw.warmer is not None
    assert gw.warmer.options_for(KeyVersion("k", 1, "h", "h", parts, owner="acme")).cache_salt == "salt-acme"
    assert gw.warmer.options_for(KeyVersion("k", 1, "h", "h", parts, owner="globex")).cache_salt is None


# -- G10: /metrics -----------------------------------------------------------------------------------------------
def test_g10_metrics_behind_a_token(fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefixplan.gateway.config import metrics_token_hash

    monkeypatch.setenv("GW_METRICS_TOKEN", "scrape-me")
    config, _, _ = fleet
    with running_gateway(replace(config, metrics_token_hash=metrics_token_hash("GW_METRICS_TOKEN"))) as (url, _):
        _chat(url, KEY_A, "acme-bot", system=SYSTEM_A)
        assert httpx.get(url + "/metrics").status_code == 401
        assert httpx.get(url + "/metrics", headers={"authorization": f"Bearer {KEY_A}"}).status_code == 401
        shown = httpx.get(url + "/metrics", headers={"authorization": "Bearer scrape-me"})
        assert shown.status_code == 200 and 'key="acme/acme-bot@v1"' in shown.text


# -- G3: a huge conflict is linear and off the event loop ---------------------------------------------------
def test_g3_a_conflict_over_32k_messages_answers_a_bounded_message(fleet) -> None:
    config, _, _ = fleet
    many = [{"role": "system", "content": f"rule {i}: be brief."} for i in range(32_000)]
    with running_gateway(config) as (url, _):
        body = {"model": "m", "messages": [*many, {"role": "user", "content": "x"}], "prefix_key": "rules@v1"}
        assert _post(url, KEY_A, body).status_code == 200
        changed = [dict(m, content=m["content"] + "!") for m in many]
        body = {"model": "m", "messages": [*changed, {"role": "user", "content": "x"}], "prefix_key": "rules@v1"}
        r = _post(url, KEY_A, body)
        message = r.json()["error"]["message"]
        assert r.status_code == 409 and "and 31992 more" in message and len(message) < 2000
        assert httpx.get(url + "/healthz").status_code == 200


def test_g3_diff_labels_each_part_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old diff counted every earlier part again for each changed part (quadratic)."""
    from prefixplan.gateway import prefix

    calls = []
    real = prefix._labels
    monkeypatch.setattr(prefix, "_labels", lambda parts: calls.append(len(parts)) or real(parts))
    old = [WirePart("system", f"s{i}") for i in range(5000)]
    new = [WirePart("system", f"t{i}") for i in range(5000)]
    assert diff_summary(old, new).endswith("and 4992 more")
    assert calls == [5000, 5000]


# -- G9: made-up names do not grow memory ---------------------------------------------------------------------
def test_g9_unknown_names_are_not_kept(fleet) -> None:
    config, _, _ = fleet
    with running_gateway(config) as (url, app):
        g = gateway_of(app)
        g.keys.cache_size = 50
        for i in range(300):
            assert _chat(url, KEY_A, f"made-up-{i}").status_code == 404
        assert len(g.keys._cache) <= 50
        assert g.ready.status == {} and g.router._ready == {}
        metrics = httpx.get(url + "/metrics").text
        assert "made-up" not in metrics


def test_bounded_quotes_of_client_values(fleet) -> None:
    config, _, _ = fleet
    with running_gateway(config) as (url, _):
        r = _chat(url, KEY_A, "x" * 1_000_000 + "@v1")
        message = r.json()["error"]["message"]
        assert r.status_code == 400 and len(message) < 400 and "(1000003 characters)" in message


def test_unit_principal_for_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefixplan.errors import UsageError
    from prefixplan.gateway.tenants import OPEN, Tenancy, tenancy_from_keys

    monkeypatch.setenv("ACME_KEYS", "k1,k2")
    path = tmp_path / "t.yaml"
    path.write_text("tenants:\n  acme:\n    keys_env: ACME_KEYS\n    cache_salt_env: ACME_SALT\n")
    with pytest.raises(UsageError, match="ACME_SALT"):
        load_tenancy(path)
    monkeypatch.setenv("ACME_SALT", "s")
    t = load_tenancy(path)
    assert t.principal("k2").tenant == "acme" and t.principal("k3") is None and t.principal(None) is None
    assert Tenancy().principal(None).tenant == OPEN
    assert tenancy_from_keys([hash_client_key("k")]).principal("k").tenant == "key-" + hash_client_key("k")[7:19]
    for bad in ("tenants: []", "tenants:\n  a: {}", "tenants:\n  a:\n    keys_env: ACME_KEYS\n    bogus: 1"):
        path.write_text(bad)
        with pytest.raises(UsageError):
            load_tenancy(path)
    path.write_text(
        "tenants:\n  a:\n    keys_env: ACME_KEYS\n    share: [x]\n  b:\n    key_hashes: ['"
        + hash_client_key("z")
        + "']\n    share: [x]\n"
    )
    with pytest.raises(UsageError, match="shared by two tenants"):
        load_tenancy(path)


def test_the_open_gateway_keeps_locked_keys_read_only(tmp_path: Path) -> None:
    """Without client keys nothing tells clients apart, but the lock still holds."""
    with FakeEngine() as e:
        config = GatewayConfig(
            endpoints=(Endpoint(e.url),),
            db=str(tmp_path / "gw.db"),
            warm=False,
            recipes=str(ROOT / "recipes"),
            lock=str(ROOT / "prefixplan.lock"),
        )
        with running_gateway(config) as (url, _):
            r = _chat(url, "anything", "support-bot@v4", system="mine")
            assert r.status_code == 403 and r.json()["error"]["code"] == "prefix_key_read_only"


def test_state_call_keeps_asyncio_responsive() -> None:
    """The big diff runs in a thread: the loop answers meanwhile (a structural check, no timing)."""
    from prefixplan.gateway import rules as keys

    seen: list[str] = []

    async def run() -> None:
        real = asyncio.to_thread

        async def spy(fn, *args, **kw):
            seen.append(getattr(fn, "__name__", "?"))
            return await real(fn, *args, **kw)

        keys.asyncio.to_thread = spy  # type: ignore[attr-defined]
        try:
            service = keys.KeyService.__new__(keys.KeyService)
            big = [WirePart("system", "x" * 70_000)]
            await keys.KeyService._diff(service, big, [WirePart("system", "y" * 70_000)], True)
        finally:
            keys.asyncio.to_thread = real  # type: ignore[attr-defined]

    asyncio.run(run())
    assert seen == ["<lambda>"]
