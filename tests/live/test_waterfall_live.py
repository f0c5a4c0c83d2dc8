"""Live: the waterfall's achieved bar against a real vLLM (CPU build, the session's ``vllm_server``).

Sequential completion requests as token ids (four shared prefixes, some shorter than a block,
random tails) go to the server with a cold prefix cache; their responses' ``cached_tokens`` are
logged beside each request. ``simulate`` of that log at the server's block size: the achieved bar
equals the sum the engine reported, and with no eviction (a small log in a large cache) the model
predicts exactly what the engine reused (nothing unexplained).
"""

from __future__ import annotations

import json
import random
import time

import httpx
import pytest

from prefixplan.api import StatusRequest, run_status, simulate, simulation_config

pytestmark = pytest.mark.live


def _requests(seed: int, n: int) -> list[list[int]]:
    rng = random.Random(seed)
    pool = list(range(1000, 5000))
    prefixes = [[rng.choice(pool) for _ in range(size)] for size in (9, 40, 100, 257)]
    return [rng.choice(prefixes) + [rng.choice(pool) for _ in range(rng.randint(3, 60))] for _ in range(n)]


def _send(server, requests: list[list[int]]) -> list[dict]:
    """The requests, one at a time, logged with the usage each response reported."""
    records = []
    with httpx.Client(timeout=120) as client:
        for i, ids in enumerate(requests):
            r = client.post(
                server.url + "/v1/completions",
                json={"model": server.served_model_name, "prompt": ids, "max_tokens": 1, "temperature": 0},
            )
            r.raise_for_status()
            usage = r.json()["usage"]
            assert usage["prompt_tokens"] == len(ids)
            records.append({"model": server.served_model_name, "prompt": ids, "timestamp": float(i), "usage": usage})
    return records


def test_achieved_equals_the_engines_cached_tokens(vllm_server) -> None:
    vllm_server.reset()
    records = _send(vllm_server, _requests(11, 24))
    engine = sum(int((r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0) for r in records)
    assert engine > 0
    wf = simulate(records, simulation_config(block_size=vllm_server.block_size), workers=1).result.waterfall
    print(
        f"engine cached {engine}, predicted {wf.predicted_tokens}, block step {wf.step('block').tokens}, "
        f"prompt {wf.prompt_tokens}, block size {vllm_server.block_size}"
    )
    assert wf.achieved_tokens == engine
    assert wf.achieved_requests == len(records)
    assert wf.step("block").tokens > 0  # the 9-token prefix is shorter than a block
    assert wf.unexplained_tokens == 0, (wf.predicted_tokens, engine)


def _status(server, path) -> dict:
    doc = run_status(StatusRequest(endpoints=(server.url,), engine="vllm")).to_dict()
    path.write_text(json.dumps(doc))
    return doc["replicas"][0]


def test_achieved_from_status_equals_the_engines_cached_tokens(vllm_server, tmp_path) -> None:
    """``status --json`` before and after the traffic: the counters' difference is the achieved bar,
    and it equals the sum of the cached_tokens the responses reported."""
    vllm_server.reset()
    before = _status(vllm_server, tmp_path / "before.json")
    requests = _requests(17, 20)
    records = _send(vllm_server, requests)
    prompt = sum(len(ids) for ids in requests)
    # the counters are exported as the engine's stats are logged: wait until they hold every
    # queried prompt token of the traffic (the test's own sync point, not a result)
    deadline = time.monotonic() + 120  # generous: a busy box exports late, never a speed check
    after = _status(vllm_server, tmp_path / "after.json")
    while after["queries"] - before["queries"] < prompt and time.monotonic() < deadline:
        time.sleep(0.5)
        after = _status(vllm_server, tmp_path / "after.json")
    engine = sum(int((r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0) for r in records)
    assert engine > 0
    snapshots = f"{tmp_path / 'before.json'},{tmp_path / 'after.json'}"
    config = simulation_config(block_size=vllm_server.block_size, achieved_from_status=snapshots)
    plain = [{k: v for k, v in r.items() if k != "usage"} for r in records]  # no cached_tokens in the log
    wf = simulate(plain, config, workers=1).result.waterfall
    print(
        f"counters: hits {after['hits'] - before['hits']:.0f}, queries {after['queries'] - before['queries']:.0f}; "
        f"responses' cached_tokens {engine}; prompt {prompt}; predicted {wf.predicted_tokens}; notes {wf.notes}"
    )
    assert wf.achieved_tokens == engine
    assert wf.achieved_source.startswith("vllm prefix-cache counters of 1 replica, between")
    assert any("the log's prompt tokens exactly" in n for n in wf.notes), wf.notes
    assert wf.unexplained_tokens == wf.predicted_tokens - engine
