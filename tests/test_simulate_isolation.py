"""``--isolate-by``: the salted hit rate equals a replay of the rendered tokens with a per-tenant salt
block in front; the salt boundary after the system prompt equals the salt put there."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prefixplan.api import simulate, simulation_config
from prefixplan.core.types import Request
from prefixplan.errors import UsageError
from prefixplan.render import load_renderer
from prefixplan.simulation import CacheModel, SimConfig, SimRequest, replay_requests

SYSTEMS = [
    "You are the Acme billing assistant. Answer questions about invoices, refunds and plans. " * 6,
    "You are a careful code reviewer for the Acme monorepo. Point out bugs, then style. " * 5,
]
SAFE = ("template", "system", "tool")


def _log(seed: int, n: int = 40) -> list[dict]:
    """Four tenants; two system prompts planted across tenants; each tenant its own document,
    quoted in its users' messages; some follow-up turns."""
    rng = np.random.default_rng(seed)
    docs = {
        f"t{k}": f"Contract of tenant {k}: " + " ".join(f"clause {k}.{j} applies." for j in range(40)) for k in range(4)
    }
    out, convo = [], {}
    for i in range(n):
        tenant = f"t{int(rng.integers(4))}"
        system = SYSTEMS[int(rng.integers(2))]
        question = f"Question {i}: what does clause {int(rng.integers(40))} say?"
        messages = [{"role": "system", "content": system}, {"role": "user", "content": docs[tenant] + "\n" + question}]
        if tenant in convo and rng.random() < 0.3:
            messages = convo[tenant] + [
                {"role": "assistant", "content": "It says so."},
                {"role": "user", "content": question},
            ]
        convo[tenant] = messages
        out.append({"model": "qwen3", "messages": messages, "user": tenant, "timestamp": 1.7e9 + 2.0 * i})
    return out


def _rendered(records, path):
    renderer = load_renderer(f"hf:{path}")
    out = []
    for i, rec in enumerate(records):
        req = Request(
            source="<memory>",
            line_no=i + 1,
            id=str(i),
            format="openai-chat",
            time=rec["timestamp"],
            model=rec["model"],
            messages=tuple(rec["messages"]),
            tenant=rec["user"],
        )
        prompt = renderer.render(req)
        safe = 0
        for seg in prompt.segments:
            if seg.kind not in SAFE:
                break
            safe = seg.end
        out.append((req, np.asarray(prompt.tokens, dtype=np.uint32), safe))
    return out


def _salt(tenant: str, size: int) -> np.ndarray:
    return np.full(size, 300_000 + int(tenant[1:]), dtype=np.uint32)


@pytest.mark.parametrize("block", [1, 16])
def test_salted_hits_equal_a_replay_with_the_salt_prepended(qwen3_path, block):
    records = _log(3)
    iso = simulate(
        records, simulation_config(block_size=block, isolate_by="tenant"), tokenizer=f"hf:{qwen3_path}", workers=1
    ).result.isolation
    rendered = _rendered(records, qwen3_path)
    ns = rendered[0][0].namespace
    prepended = [
        SimRequest(req.time, ns, np.concatenate([_salt(req.tenant, block), toks]), index=i)
        for i, (req, toks, _) in enumerate(rendered)
    ]
    res = replay_requests(prepended, SimConfig(cache=CacheModel(block_size=block)))
    cached = res.run(res.persistent).cached
    # the salt block is reused by every later request of its tenant; the prompt's own hits follow it
    assert iso["hit_tokens"]["salted"] == int(np.maximum(cached - block, 0).sum())
    plain = [SimRequest(req.time, ns, toks, index=i) for i, (req, toks, _) in enumerate(rendered)]
    res = replay_requests(plain, SimConfig(cache=CacheModel(block_size=block)))
    assert iso["hit_tokens"]["shared"] == res.run(res.persistent).hit_tokens
    # planted: the system prompts are shared across tenants, the documents are not
    assert iso["hit_tokens"]["shared"] > iso["hit_tokens"]["salt_after_shared_prefix"] >= iso["hit_tokens"]["salted"]
    assert iso["salt_boundary_returns_tokens"] > 0
    assert iso["tenants"] == 4 and iso["requests_without_tenant"] == 0
    assert {p["label"] for p in iso["shared_prefixes"]} == {"system"}
    assert all(p["tenants"] >= 2 for p in iso["shared_prefixes"])


def test_salt_boundary_equals_the_salt_after_the_system_prompt(qwen3_path):
    records = _log(5)
    iso = simulate(
        records, simulation_config(block_size=1, isolate_by="user"), tokenizer=f"hf:{qwen3_path}", workers=1
    ).result.isolation
    rendered = _rendered(records, qwen3_path)
    ns = rendered[0][0].namespace
    salted = [
        SimRequest(req.time, ns, np.concatenate([toks[:safe], _salt(req.tenant, 1), toks[safe:]]), index=i)
        for i, (req, toks, safe) in enumerate(rendered)
    ]
    res = replay_requests(salted, SimConfig(cache=CacheModel(block_size=1)))
    cached = res.run(res.persistent).cached
    safe = np.array([s for _, _, s in rendered])  # the log's times increase: replay order is input order
    # a hit that reaches past the salt token counts it: take it off
    assert iso["hit_tokens"]["salt_after_shared_prefix"] == int((cached - (cached > safe)).sum())


def test_isolate_by_takes_a_tenant_id_or_a_field_path():
    assert simulation_config(isolate_by="metadata.org_id").isolation.field == "metadata.org_id"
    assert simulation_config(isolate_by="user").isolation.field is None
    for bad in ("metadata..org", "org id", ".org"):
        with pytest.raises(UsageError, match="field of the log record"):
            simulation_config(isolate_by=bad)
    with pytest.raises(UsageError, match="cache_salt"):
        simulation_config(isolate_by="tenant", provider="openai")


def _orgs(records: list[dict]) -> list[str | None]:
    """Plant the tenant in ``metadata.org_id`` (an integer for one tenant, missing or unusable for
    a few requests) and make ``user`` useless for grouping (one user id for all)."""
    out = []
    for i, rec in enumerate(records):
        org = rec.pop("user")
        rec["user"] = "svc-account"
        if i % 9 == 4:
            rec["metadata"] = {"org_id": ["not", "an", "id"]} if i % 2 else {}
            out.append(None)
            continue
        value: str | int = int(org[1:]) + 100 if org == "t3" else f"org-{org}"
        rec["metadata"] = {"org_id": value, "user_id": "decoy"}
        out.append(str(value))
    return out


@pytest.mark.parametrize("block", [1, 16])
def test_isolate_by_field_equals_a_replay_salted_by_that_field(qwen3_path, tmp_path, block):
    records = _log(7)
    orgs = _orgs(records)
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    iso = simulate(
        [str(path)], simulation_config(block_size=block, isolate_by="metadata.org_id"), tokenizer=f"hf:{qwen3_path}"
    ).result.isolation
    rendered = _rendered([{**r, "user": "x"} for r in records], qwen3_path)
    ns = rendered[0][0].namespace
    groups = {org: k for k, org in enumerate(dict.fromkeys(orgs))}  # missing/unusable: one group of their own
    prepended = [
        SimRequest(req.time, ns, np.concatenate([np.full(block, 300_000 + groups[org], np.uint32), toks]), index=i)
        for i, ((req, toks, _), org) in enumerate(zip(rendered, orgs, strict=True))
    ]
    res = replay_requests(prepended, SimConfig(cache=CacheModel(block_size=block)))
    cached = res.run(res.persistent).cached
    assert iso["hit_tokens"]["salted"] == int(np.maximum(cached - block, 0).sum())
    assert iso["by"] == "metadata.org_id" and "metadata.org_id" in iso["field"]
    assert iso["tenants"] == 4 and iso["requests_without_tenant"] == orgs.count(None) > 0
    # by the usual tenant id (one service account) nothing is isolated
    plain = simulate(
        [str(path)], simulation_config(block_size=block, isolate_by="user"), tokenizer=f"hf:{qwen3_path}"
    ).result.isolation
    assert plain["tenants"] == 1 and plain["hit_tokens"]["salted"] == plain["hit_tokens"]["shared"]
    assert iso["hit_tokens"]["shared"] == plain["hit_tokens"]["shared"] > iso["hit_tokens"]["salted"]


def test_field_value_reads_a_dotted_path():
    from prefixplan.logs.dispatch import field_value

    rec = {"metadata": {"org_id": 7, "tags": ["a", "b"], "flag": True, "empty": ""}, "h": {"x-org": "acme"}}
    assert field_value(rec, "metadata.org_id") == "7"
    assert field_value(rec, "metadata.tags.1") == "b"
    assert field_value(rec, "h.x-org") == "acme"
    for path in (
        "metadata.tags",
        "metadata.flag",
        "metadata.empty",
        "metadata.nope",
        "h.x-org.deeper",
        "metadata.tags.9",
    ):
        assert field_value(rec, path) is None


def test_analyze_isolates_by_tenant_as_simulate_does(qwen3_path):
    """analyze --isolate-by: the record's simulation.isolation is simulate's at the same capacity."""
    from prefixplan.api import analyze

    records = _log(9)
    tok = f"hf:{qwen3_path}"
    rec = analyze(records, tokenizer=tok, configured_capacity=3000, isolate_by="tenant", rag_whatif=False).to_json()
    iso = rec["simulation"]["isolation"]
    sim = simulate(records, simulation_config(capacity="3000", isolate_by="tenant"), tokenizer=tok, workers=1)
    assert iso == sim.result.isolation
    assert iso["tenants"] == 4 and iso["isolation_cost_tokens"] > 0
    with pytest.raises(UsageError, match="analyze salts by the log.s tenant id"):
        analyze(records, tokenizer=tok, isolate_by="metadata.org_id")


def test_isolate_by_field_reads_the_same_with_workers_and_refuses_a_trace_file(qwen3_path, tmp_path):
    """The field is read where the lines are parsed: two processes give what one does; a trace
    file's rows keep the tenant read when it was written, so a field is refused there."""
    records = _log(11)
    _orgs(records)
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    config = simulation_config(block_size=16, isolate_by="metadata.org_id")
    tok = f"hf:{qwen3_path}"
    one = simulate([str(path)], config, tokenizer=tok, workers=1).result.isolation
    two = simulate([str(path)], config, tokenizer=tok, workers=2).result.isolation
    assert one == two and one["tenants"] == 4
    trace = tmp_path / "rows.parquet"
    from prefixplan.api import SimulateRequest, run_simulate
    from prefixplan.api.source import source_options

    run_simulate(
        SimulateRequest(
            source_options([str(path)], tokenizer=tok), simulation_config(block_size=16), trace_out=str(trace)
        )
    )
    with pytest.raises(UsageError, match="a trace file's rows carry the tenant id"):
        simulate([str(trace)], config)


def test_isolation_on_a_fleet_equals_a_fleet_replay_with_the_salt_prepended(qwen3_path):
    """--replicas N: each replica's cache salted per tenant; under round-robin (routing that does
    not read the prompt) that is a fleet replay of the tokens with the salt block in front."""
    from prefixplan.simulation.fleet import FleetModel

    records, block = _log(13), 16
    config = simulation_config(block_size=block, isolate_by="tenant", replicas=2, router="round-robin")
    res = simulate(records, config, tokenizer=f"hf:{qwen3_path}", workers=1).result
    iso = res.isolation["fleet"]
    assert iso["router"] == "round-robin" and iso["replicas"] == 2
    assert iso["hit_tokens"]["shared"] == res.fleet[0].cached_tokens
    rendered = _rendered(records, qwen3_path)
    ns = rendered[0][0].namespace
    prepended = [
        SimRequest(req.time, ns, np.concatenate([_salt(req.tenant, block), toks]), index=i)
        for i, (req, toks, _) in enumerate(rendered)
    ]
    fleet = FleetModel(replicas=2, routers=("round-robin",))
    replay = replay_requests(prepended, SimConfig(cache=CacheModel(block_size=block), fleet=fleet)).fleet[0]
    assert iso["hit_tokens"]["salted"] == int(np.maximum(replay.cached - block, 0).sum())
    assert iso["hit_tokens"]["shared"] > iso["hit_tokens"]["salt_after_shared_prefix"] >= iso["hit_tokens"]["salted"]
