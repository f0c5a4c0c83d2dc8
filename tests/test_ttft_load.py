"""TTFT under load (simulate --rate-scale): the queue of one replica on hand-computable cases, the
same queue against a step-by-step reference written from its definition, and the timed replay of a
log equal to the prefill-only TTFT when requests never meet (rate -> 0). Time is a number the
model carries (a virtual clock): nothing here depends on the machine's speed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from prefixplan.errors import UsageError
from prefixplan.savings.prefill import PrefillProfile, load_profile, percentiles
from prefixplan.simulation import CacheModel, SimConfig, SimRequest, replay_requests
from prefixplan.simulation.config import SavingsModel
from prefixplan.simulation.fleet import FleetModel
from prefixplan.simulation.load import LoadModel, vllm_defaults
from prefixplan.simulation.queue import Engine, StepCost, replica_ttft

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"


# -- one replica, by hand -----------------------------------------------------------------------


def test_two_requests_sharing_a_chunked_step() -> None:
    """Step = 1 s + 0.5 s a token (c = 0), 4 tokens a step.

    A (t=0, 6 tokens, 2 output): step 1 [0, 3] prefills 4 of A; B (t=1, 2 tokens) waits.
    Step 2 [3, 6]: A's last 2 and B's 2 (4 tokens, 3 s): both have their first token at 6:
    TTFT A = 6, B = 6 - 1 = 5. Step 3 [6, 7.5] decodes A's second token."""
    ttft = replica_ttft([0.0, 1.0], [6, 2], [0, 0], [2, 1], StepCost(1.0, 0.5, 0.0), Engine(4, 4))
    assert ttft.tolist() == [6.0, 5.0]


def test_a_request_arriving_while_another_decodes() -> None:
    """A (t=0, 2 tokens, 3 output): step 1 [0, 2], TTFT 2. Step 2 [2, 3.5] decodes A alone (B arrives
    at 2.5, during it). Step 3 [3.5, 6.5]: A's decode (1 token) and B's 3 prefill tokens: 1 + 0.5 * 4 =
    3 s; TTFT B = 6.5 - 2.5 = 4."""
    ttft = replica_ttft([0.0, 2.5], [2, 3], [0, 0], [3, 1], StepCost(1.0, 0.5, 0.0), Engine(4, 4))
    assert ttft.tolist() == [2.0, 4.0]


def test_a_full_replica_keeps_the_next_request_waiting() -> None:
    """max_num_seqs 1: B (t=0) starts only when A (t=0, 1 token, 3 output) has finished decoding.
    Steps of 1 + 0.5 * tokens: [0, 1.5] A's prefill (TTFT 1.5), [1.5, 3] and [3, 4.5] A's decodes,
    [4.5, 6] B's prefill: TTFT B = 6."""
    ttft = replica_ttft([0.0, 0.0], [1, 1], [0, 0], [3, 1], StepCost(1.0, 0.5, 0.0), Engine(4, 1))
    assert ttft.tolist() == [1.5, 6.0]


def test_chunks_add_up_to_the_profile_plus_a_per_extra_chunk() -> None:
    """The attention pairs of the chunks sum to the whole prompt's, so a prompt alone in chunks of the
    budget takes the profile's t(new, cached) plus ``a`` for every step after the first."""
    prof = PrefillProfile("p", a=0.004, b=3e-5, c=1.1e-9)
    cost = StepCost(prof.a, prof.b, prof.c)
    for new, cached, budget in ((5000, 0, 8192), (20000, 3000, 8192), (20000, 3000, 2048), (7, 2, 1)):
        chunks = -(-new // budget)
        got = replica_ttft([0.0], [new], [cached], [1], cost, Engine(budget, 1))[0]
        assert got == pytest.approx(prof.seconds(new, cached) + (chunks - 1) * prof.a, rel=1e-12)
    # c alone, by hand: 2 new after 2 cached = 2 * (2 + 2/2) = 6 pairs; in two chunks 2.5 + 3.5
    assert replica_ttft([0.0], [2], [2], [1], StepCost(0.0, 0.0, 1.0), Engine(1, 1)).tolist() == [6.0]


def test_engine_limits_are_checked() -> None:
    with pytest.raises(UsageError):
        Engine(0, 1)
    with pytest.raises(UsageError, match="max-num-seqs"):
        Engine(256, 1024)
    with pytest.raises(UsageError, match="rate-scale"):
        LoadModel(rate_scale=0)


def test_vllm_defaults_follow_the_gpu() -> None:
    def limits(gpu: str) -> tuple[int, int]:
        engine = vllm_defaults(PrefillProfile("p", 0.0, 0.0, 0.0, gpu=gpu))[0]
        return engine.max_num_batched_tokens, engine.max_num_seqs

    assert limits("H100-SXM") == limits("H200") == (8192, 1024)
    assert limits("B200") == (16384, 1024)
    assert limits("A100-SXM-80GB") == limits("L4") == (2048, 256)
    assert limits("my lab's card") == (8192, 1024)  # unknown: as the default GPU (an H100)
    l4 = PrefillProfile("p", 0.0, 0.0, 0.0, gpu="L4")
    assert LoadModel(1.0, max_num_batched_tokens=128).engine(l4)[0] == Engine(128, 128)  # seqs <= tokens
    assert LoadModel(1.0, max_num_seqs=512).engine(l4)[0] == Engine(2048, 512)
    assert LoadModel(1.0, 4096, 64).engine(l4) == (Engine(4096, 64), "as given")


# -- the same queue against a step-by-step reference ------------------------------------------------


def _reference(arrival, new, cached, output, cost: StepCost, engine: Engine) -> list[float]:
    """The module docstring's loop, one step at a time, with plain lists (slow and obvious)."""
    n = len(arrival)
    left, ctx = list(new), [float(x) for x in cached]
    decodes_left = [max(1, o) - 1 for o in output]
    started: set[int] = set()
    queue: list[int] = []
    decoding: list[int] = []
    ttft = [0.0] * n
    now, nxt = 0.0, 0
    while nxt < n or queue or decoding:
        if not queue and not decoding:
            now = max(now, arrival[nxt])
        while nxt < n and arrival[nxt] <= now:
            queue.append(nxt)
            nxt += 1
        room = engine.max_num_batched_tokens - len(decoding)
        tokens, pairs = len(decoding), sum(ctx[r] + 0.5 for r in decoding)
        running = len(decoding) + len(started)
        chunks = []
        for r in queue:
            if room <= 0:
                break
            if r not in started:
                if running >= engine.max_num_seqs:
                    break
                started.add(r)
                running += 1
            take = min(left[r], room)
            chunks.append((r, take))
            tokens, pairs, room = tokens + take, pairs + take * (ctx[r] + take / 2), room - take
        now += cost.a + cost.b * tokens + cost.c * pairs
        for r in list(decoding):
            ctx[r] += 1
            decodes_left[r] -= 1
            if decodes_left[r] == 0:
                decoding.remove(r)
        for r, take in chunks:
            left[r] -= take
            ctx[r] += take
            if left[r] == 0:
                queue.remove(r)
                started.discard(r)
                ttft[r] = now - arrival[r]
                if decodes_left[r]:
                    decoding.append(r)
    return ttft


def test_queue_equals_the_step_by_step_reference() -> None:
    rng = np.random.default_rng(39)
    for _ in range(300):
        n = int(rng.integers(1, 25))
        arrival = np.cumsum(rng.exponential(rng.choice([0.05, 0.5, 5.0]), n)).tolist()
        if rng.random() < 0.3:
            arrival = [round(t) for t in arrival]  # ties
        new = rng.integers(0 if rng.random() < 0.1 else 1, 60, n).tolist()
        cached = rng.integers(0, 40, n).tolist()
        output = rng.integers(1, 30, n).tolist()
        budget = int(rng.integers(1, 50))
        engine = Engine(budget, int(rng.integers(1, budget + 1)))
        cost = StepCost(*(float(x) for x in rng.choice([0.0, 1.0], 3) * rng.uniform(1e-3, 0.1, 3)))
        got = replica_ttft(arrival, new, cached, output, cost, engine)
        want = _reference(arrival, new, cached, output, cost, engine)
        assert got.tolist() == pytest.approx(want, rel=1e-9, abs=1e-12), (n, budget, engine, cost)


# -- the timed replay of a log ----------------------------------------------------------------------


def _requests(n: int = 60, seed: int = 7) -> list[SimRequest]:
    """Three system prompts (1,000-3,000 tokens) and a user tail each; output lengths 0-300 (0 = unknown)."""
    rng = np.random.default_rng(seed)
    systems = [np.arange(k * 10_000, k * 10_000 + size, dtype=np.uint32) for k, size in enumerate((1000, 2000, 3000))]
    out = []
    for i in range(n):
        tail = rng.integers(100_000, 200_000, int(rng.integers(20, 2000))).astype(np.uint32)
        tokens = np.concatenate([systems[int(rng.integers(0, 3))], tail])
        out.append(
            SimRequest(time=float(i) * 2.0, namespace="m", tokens=tokens, output_len=int(rng.integers(0, 300)), index=i)
        )
    return out


def test_rate_to_zero_equals_the_prefill_only_figures() -> None:
    """Requests that never meet wait for nothing: TTFT = t(n - hit, hit) (+ tier loads), the savings'
    figures, for one replica and for every fleet size and router (prompts fit in one step)."""
    profile = load_profile(None)
    config = SimConfig(
        cache=CacheModel(capacities=(4000.0,)),
        fleet=FleetModel(replicas=3, routers=("round-robin", "cache-aware")),
        load=LoadModel(rate_scale=1e-9),
    )
    res = replay_requests(_requests(), config)
    assert res.load is not None and res.savings is not None
    one = res.load.rows[0]
    assert (one.replicas, one.router, one.cache) == (1, None, res.headline)
    assert one.with_cache == pytest.approx(res.savings.ttft_with, rel=1e-6)
    assert one.without == pytest.approx(res.savings.ttft_without, rel=1e-6)
    assert [(r.replicas, r.router) for r in res.load.rows[1:]] == [
        (2, "round-robin"),
        (2, "cache-aware"),
        (3, "round-robin"),
        (3, "cache-aware"),
    ]
    prompt = np.array([len(r.tokens) for r in _requests()], dtype=np.float64)
    for row in res.load.rows[1:]:
        assert row.without == pytest.approx(res.savings.ttft_without, rel=1e-6)
    fleet_rr = next(run for run in res.fleet if run.policy == "round-robin")  # routing does not depend on time
    hit = fleet_rr.cached.astype(np.float64)
    assert res.load.rows[3].with_cache == pytest.approx(percentiles(profile.seconds(prompt - hit, hit)), rel=1e-6)


def test_rate_to_zero_with_tiers_adds_their_load_time() -> None:
    from prefixplan.savings.kvsize import lookup_builtin
    from prefixplan.simulation.capacity import parse_tier

    kv = lookup_builtin("Llama-3.1-8B-Instruct")
    config = SimConfig(
        cache=CacheModel(capacities=(2500.0,), tiers=(parse_tier("cpu:1e6:25:0.5", kv),)),
        savings=SavingsModel(kv=kv),
        load=LoadModel(rate_scale=1e-9),
    )
    res = replay_requests(_requests(), config)
    assert res.load is not None and res.savings is not None and res.tier_load_s is not None
    assert res.tier_load_s.max() > 0
    assert res.load.rows[0].with_cache == pytest.approx(res.savings.ttft_with, rel=1e-6)


def test_load_is_where_caching_pays() -> None:
    """At 400x the rate the replica queues: TTFT rises above prefill-only, and more without caching."""
    res = replay_requests(_requests(120), SimConfig(cache=CacheModel(capacities=(8000.0,)), load=LoadModel(400.0)))
    assert res.load is not None and res.savings is not None
    row = res.load.rows[0]
    assert row.without[0] > res.savings.ttft_without[0] and row.with_cache[0] > res.savings.ttft_with[0]
    assert row.with_cache[0] < row.without[0] and row.with_cache[1] < row.without[1]
    assert res.load.requests_without_output > 0 and res.load.default_output == 200


# -- the command --------------------------------------------------------------------------------------


def test_simulate_rate_scale_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prefixplan.cli.app import main

    out = tmp_path / "sim.json"
    argv = ["simulate", str(EXAMPLE), "--capacity", "2e4", "--replicas", "2", "--router", "round-robin"]
    assert main([*argv, "--rate-scale", "2", "--max-num-batched-tokens", "4096", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "TTFT under load, a model" in text and "2x the log's arrival rate" in text
    doc = json.loads(out.read_text())["ttft_under_load"]
    assert (doc["rate_scale"], doc["max_num_batched_tokens"], doc["max_num_seqs"]) == (2.0, 4096, 1024)
    assert [(r["replicas"], r["router"]) for r in doc["rows"]] == [(1, None), (2, "round-robin")]
    for row in doc["rows"]:
        assert set(row["with"]) == {"p50_s", "p95_s", "p99_s"} and row["with"]["p50_s"] <= row["with"]["p99_s"]
    assert doc["profile_provenance"].startswith("derived from") and doc["assumptions"]
    assert "ttft_under_load" not in json.loads(_simulate_json(tmp_path, main))


def _simulate_json(tmp_path: Path, main) -> str:
    out = tmp_path / "plain.json"
    assert main(["simulate", str(EXAMPLE), "-q", "--json", str(out)]) == 0
    return out.read_text()


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--max-num-seqs", "8"], "--rate-scale"),
        (["--rate-scale", "1", "--provider", "openai", "--model", "gpt-4.1"], "hosted"),
        (["--rate-scale", "-1"], "--rate-scale"),
        (["--rate-scale", "1", "--max-num-batched-tokens", "64", "--max-num-seqs", "128"], "max-num-seqs"),
        (["--profile", "h100-8b", "--gpu", "H200"], "--profile and --gpu"),
    ],
)
def test_simulate_load_and_profile_usage_errors(extra: list[str], needle: str, capsys) -> None:
    from prefixplan.cli.app import main

    assert main(["simulate", str(EXAMPLE), "-q", *extra]) == 2
    assert needle in capsys.readouterr().err
