"""The gateway following real vLLM replicas' KV events (CPU build, tiny Qwen3, block size 128).

Must-show of issue 41 (the gateway's part), with two replicas that publish events: r0 the
session server, r1 a small one (10 blocks of 128 tokens: ``--num-gpu-blocks-override 10``,
``--max-model-len 1024``) where unrelated prompts force evictions:

- after the gateway's warm, the index holds exactly the key's block-aligned prefix on each
  replica: the keys of the ``/tokenize`` ids' full blocks, nothing else (both caches reset first);
- unrelated prompts sent to r1 evict the key there: it turns ``evicted``, routing stops counting on
  it, it is re-warmed to ``ready``, and no client request through the gateway fails meanwhile;
- a sequential replay through the gateway (``--router residency``): per request, the cached tokens
  predicted from the index on the replica chosen equal the cached tokens vLLM reports.

Figures go to test-artifacts/live-summary.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("zmq")
pytest.importorskip("starlette")

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "test-artifacts" / "live-summary.json"
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import ARTIFACTS, LiveServer, _server_module, _unavailable  # noqa: E402
from gateway_harness import gateway_of, running_gateway, wait_for  # noqa: E402

from prefixplan.gateway.config import GatewayConfig  # noqa: E402
from prefixplan.gateway.events import event_sources  # noqa: E402
from prefixplan.gateway.rewarm import RewarmConfig  # noqa: E402
from prefixplan.routing.policies import RouterConfig  # noqa: E402
from prefixplan.warming.source import load_endpoints  # noqa: E402

SYSTEM = "You are the Acme returns assistant. " + " ".join(
    f"Policy {i}: items bought in store {i} may be returned within {i + 10} days." for i in range(22)
)
KEY = "returns@v1"


def _summary(key: str, value: object) -> None:
    SUMMARY.parent.mkdir(exist_ok=True)
    data = json.loads(SUMMARY.read_text()) if SUMMARY.is_file() else {}
    data[key] = value
    SUMMARY.write_text(json.dumps(data, indent=2) + "\n")
    print(f"{key}: {json.dumps(value)}")


@pytest.fixture(scope="module")
def small_replica(vllm_server: LiveServer) -> Iterator[LiveServer]:
    """A second server with a 10-block KV cache, publishing KV events."""
    if not vllm_server.kv_events_endpoint:
        pytest.skip("the live server does not publish KV events")
    mod = _server_module()
    python = Path(os.environ.get("PREFIXPLAN_VLLM_PYTHON", mod.DEFAULT_PYTHON))
    try:
        info, proc = mod.start(
            vllm_server.model_dir,
            python=python,
            log_path=ARTIFACTS / "vllm-server-small.log",
            max_model_len=1024,
            kv_events=True,
            extra_args=["--num-gpu-blocks-override", "10"],
            timeout=300,
        )
    except mod.ServerError as err:
        _unavailable(str(err))
    try:
        yield LiveServer(
            url=info.url,
            served_model_name=info.served_model_name,
            model_dir=Path(info.model_dir),
            block_size=int(info.block_size or vllm_server.block_size),
            log_path=Path(info.log_path),
            startup_s=info.startup_s,
            kv_events_endpoint=info.kv_events_endpoint,
            kv_events_replay=info.kv_events_replay,
        )
    finally:
        mod.stop_process(proc.pid)
        with contextlib.suppress(Exception):
            proc.wait(timeout=30)
        mod.remove_kv_event_files(info.port)


def _chat(url: str, user: str, *, system: bool = False) -> httpx.Response:
    messages = ([{"role": "system", "content": SYSTEM}] if system else []) + [{"role": "user", "content": user}]
    body = {"model": "tiny-qwen3", "messages": messages, "max_tokens": 1, "temperature": 0, "prefix_key": KEY}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=120)


def _tokenize(url: str, user: str) -> list[int]:
    messages = [{"role": "user", "content": user}]
    body = {"model": "tiny-qwen3", "messages": messages, "prefix_key": KEY, "add_generation_prompt": True}
    r = httpx.post(url + "/tokenize", json=body, timeout=60)
    r.raise_for_status()
    return list(r.json()["tokens"])


def _server_ids(server: LiveServer, messages: list[dict]) -> list[int]:
    body = {"model": server.served_model_name, "messages": messages, "add_generation_prompt": True}
    r = httpx.post(server.url + "/tokenize", json=body, timeout=60)
    r.raise_for_status()
    return list(r.json()["tokens"])


def _replay() -> list[tuple[str, list[dict]]]:
    """Four conversations of two turns (a long first message: its blocks are reused by the second
    turn where it lands on the same replica), interleaved, then two short questions."""
    first = {c: " ".join(f"Order {c}-{i} came back damaged, box {i} of {c + 3}." for i in range(28)) for c in range(4)}
    out: list[tuple[str, list[dict]]] = []
    for pair in ((0, 1), (2, 3)):
        out += [(first[c], []) for c in pair]
        out += [
            ("What now?", [{"role": "user", "content": first[c]}, {"role": "assistant", "content": "Sorry."}])
            for c in pair
        ]
    return [*out, ("Where do I send a return?", []), ("How long do refunds take?", [])]


def _unrelated(server: LiveServer, n: int) -> list[int]:
    text = " ".join(f"Unrelated note {n}.{i}: nothing to do with returns." for i in range(120))
    r = httpx.post(server.url + "/tokenize", json={"model": server.served_model_name, "prompt": text}, timeout=60)
    r.raise_for_status()
    return list(r.json()["tokens"])[:900]


def _reset(*servers: LiveServer) -> None:
    """Reset the prefix caches; vLLM publishes ``AllBlocksCleared`` with its next step, which a
    short request (no full block) carries out."""
    for s in servers:
        s.reset()
        body = {"model": s.served_model_name, "prompt": [1, 2, 3], "max_tokens": 1}
        httpx.post(s.url + "/v1/completions", json=body, timeout=120).raise_for_status()


def test_the_gateway_keeps_readiness_true_on_real_vllm(vllm_server: LiveServer, small_replica, tmp_path) -> None:
    servers = {"r0": vllm_server, "r1": small_replica}
    bs = vllm_server.block_size
    _reset(*servers.values())
    # r0's events are discovered (GET /kv_event_sources), r1's given as its engine was
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        f"replicas:\n  - url: {vllm_server.url}\n    name: r0\n    kv_events: auto\n"
        f"  - url: {small_replica.url}\n    name: r1\n"
        f"    kv_events: {{endpoint: '{small_replica.kv_events_endpoint}',"
        f" replay_endpoint: '{small_replica.kv_events_replay}'}}\n"
    )
    endpoints = tuple(load_endpoints(fleet))
    sources = event_sources(str(fleet), endpoints, model=vllm_server.served_model_name)
    assert [(s.replica, s.endpoint) for s in sources] == [
        ("r0", vllm_server.kv_events_endpoint),
        ("r1", small_replica.kv_events_endpoint),
    ]
    config = GatewayConfig(
        endpoints=endpoints,
        db=str(tmp_path / "gw.db"),
        router=RouterConfig(policy="residency"),
        kv_events=sources,
        rewarm=RewarmConfig(keys="all", backoff_s=1.0, max_backoff_s=4.0, per_minute=30),
        stats_interval_s=1.0,
    )
    with running_gateway(config) as (url, app):
        g = gateway_of(app)
        index, keys = g.events.index, g.events.keys
        assert _chat(url, "Hello", system=True).status_code == 200  # registers, warms in the background
        wait_for(lambda: all(keys.counts(KEY, r) for r in servers), "ready on both replicas", limit=180)

        # -- 1. the index holds exactly the key's block-aligned prefix ------------------------
        prefix = keys.prefix_tokens(KEY)
        assert prefix is not None
        ids = _tokenize(url, "Hello")
        full = prefix // bs
        want = index.prompt_keys(ids[: full * bs], bs, model=vllm_server.served_model_name)
        assert len(want) == full >= 3
        _reset(*servers.values())  # only the warm's blocks from here: reset, then re-warmed
        wait_for(lambda: all(keys.state(KEY, r).evictions >= 1 for r in servers), "the resets seen", limit=120)
        wait_for(lambda: all(keys.counts(KEY, r) for r in servers), "re-warmed after the reset", limit=180)
        wait_for(lambda: all(index.resident_keys(r) == set(want) for r in servers), "exactly the key's blocks")
        exact = {r: sorted(index.status(r).resident_blocks.items()) for r in servers}

        # -- 2. eviction on the small replica, no client request failing -------------------------
        codes: list[int] = []
        before, rewarms_before = keys.state(KEY, "r1").evictions, keys.state(KEY, "r1").rewarms
        n = 0
        while keys.state(KEY, "r1").evictions == before:
            body = {"model": small_replica.served_model_name, "prompt": _unrelated(small_replica, n), "max_tokens": 1}
            httpx.post(small_replica.url + "/v1/completions", json=body, timeout=120).raise_for_status()
            codes.append(_chat(url, f"Can I return item {n}?").status_code)  # clients keep going
            n += 1
            assert n < 20, "the small cache never evicted the key"
        evicted_seen = keys.state(KEY, "r1").state  # "evicted", unless its re-warm was already seen
        wait_for(lambda: keys.counts(KEY, "r1") is True, "re-warmed to ready on r1", limit=180)
        for i in range(4):
            codes.append(_chat(url, f"And item {100 + i}?").status_code)
        r1 = keys.state(KEY, "r1")
        assert set(codes) == {200}
        assert r1.rewarms > rewarms_before and r1.evictions > before and r1.state == "ready"

        # -- 3. sequential replay: predicted from the index = reported by vLLM ----------------------
        seen = {r: keys.state(KEY, r).evictions for r in servers}
        _reset(*servers.values())
        wait_for(lambda: all(keys.state(KEY, r).evictions > seen[r] for r in servers), "the last reset", limit=120)
        wait_for(lambda: all(keys.counts(KEY, r) for r in servers), "ready after a last reset", limit=180)
        rows = []
        for user, history in _replay():
            # the ids the gateway sends: the key's system message, then the conversation
            messages = [{"role": "system", "content": SYSTEM}, *history, {"role": "user", "content": user}]
            req_ids = _server_ids(vllm_server, messages)
            pk = index.prompt_keys(req_ids, bs, model=vllm_server.served_model_name)
            last = (len(req_ids) - 1) // bs  # vLLM computes the last token: at most this many blocks reused
            predicted = {r: min(index.resident_prefix_blocks(r, pk), last) * bs for r in servers}
            body = {"model": "tiny-qwen3", "messages": [*history, {"role": "user", "content": user}]}
            body.update(max_tokens=1, temperature=0, prefix_key=KEY)
            resp = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
            assert resp.status_code == 200
            rep = resp.headers["x-prefixplan-replica"]
            usage = resp.json()["usage"]
            assert usage["prompt_tokens"] == len(req_ids)
            rows.append(
                {
                    "replica": rep,
                    "route": resp.headers["x-prefixplan-route"],
                    "prompt": len(req_ids),
                    "predicted": predicted[rep],
                    "reported": usage["prompt_tokens_details"]["cached_tokens"],
                }
            )
            mine = pk[: len(req_ids) // bs]
            wait_for(lambda: index.holds(rep, mine), "the request's blocks in the index")
        metrics = httpx.get(url + "/metrics").text
    assert all(r["predicted"] == r["reported"] for r in rows), rows
    counted = [line for line in metrics.splitlines() if line.startswith("prefixplan_gateway_cached_predictions_total")]
    _summary(
        "gateway_kv_events",
        {
            "block_size": bs,
            "key_prefix_tokens": prefix,
            "key_full_blocks": full,
            "index_after_warm": exact,
            "unrelated_prompts_to_evict": n,
            "state_after_eviction": evicted_seen,
            "r1_evictions": r1.evictions,  # one is the reset of step 1
            "r1_rewarms": r1.rewarms,
            "client_requests_during_eviction": len(codes),
            "client_failures": sum(1 for c in codes if c != 200),
            "replay_requests": len(rows),
            "replay_equal": sum(1 for r in rows if r["predicted"] == r["reported"]),
            "replay_rows": rows,
            "gateway_prediction_counters": counted,
        },
    )
