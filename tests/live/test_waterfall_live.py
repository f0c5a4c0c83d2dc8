"""Live: the waterfall's achieved bar against a real vLLM (CPU build, the session's ``vllm_server``).

Sequential completion requests as token ids (four shared prefixes, some shorter than a block,
random tails) go to the server with a cold prefix cache; their responses' ``cached_tokens`` are
logged beside each request. ``simulate`` of that log at the server's block size: the achieved bar
equals the sum the engine reported, and with no eviction (a small log in a large cache) the model
predicts exactly what the engine reused (nothing unexplained).
"""

from __future__ import annotations

import random

import httpx
import pytest

from prefixplan.api import simulate, simulation_config

pytestmark = pytest.mark.live


def _requests(seed: int, n: int) -> list[list[int]]:
    rng = random.Random(seed)
    pool = list(range(1000, 5000))
    prefixes = [[rng.choice(pool) for _ in range(size)] for size in (9, 40, 100, 257)]
    return [rng.choice(prefixes) + [rng.choice(pool) for _ in range(rng.randint(3, 60))] for _ in range(n)]


def test_achieved_equals_the_engines_cached_tokens(vllm_server) -> None:
    vllm_server.reset()
    records = []
    with httpx.Client(timeout=120) as client:
        for i, ids in enumerate(_requests(11, 24)):
            r = client.post(
                vllm_server.url + "/v1/completions",
                json={"model": vllm_server.served_model_name, "prompt": ids, "max_tokens": 1, "temperature": 0},
            )
            r.raise_for_status()
            usage = r.json()["usage"]
            assert usage["prompt_tokens"] == len(ids)
            records.append(
                {"model": vllm_server.served_model_name, "prompt": ids, "timestamp": float(i), "usage": usage}
            )
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
