"""`warm --recipes` (render with the server's tokenizer, cut at the user's question), chat warming
on generic OpenAI-compatible servers that take no token-id prompts (recipes and analysis
candidates via their example request), and probe_ids preferred over the record's tokenizer spec.

The fake (tests/fake_engine.py) renders chat requests with its own small template and tokenizes
one id per character, so the expected prefix ids are computed here independently of prefixplan.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_engine import FakeEngine, char_tokenize, chat_text
from records import plan_from_record

from prefixplan.cli.app import main
from prefixplan.engines.base import TOKENIZER_PROBE_TEXT
from prefixplan.engines.endpoint import Endpoint
from prefixplan.errors import ExitCode, UsageError
from prefixplan.keys.recipes import load_recipes
from prefixplan.store import open_store
from prefixplan.warming.prompts import (
    PROBE_QUESTION,
    WARM_QUESTION,
    PromptForm,
    form_from_request,
)
from prefixplan.warming.recipes import recipe_form, render_recipe, source_from_recipes
from prefixplan.warming.run import WarmOptions, run_warm

SYSTEM = "You are the Acme assistant. " + "Answer briefly and cite the policy section. " * 4
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Find an order by number.",
        "parameters": {"type": "object", "properties": {"n": {"type": "string"}}},
    },
}
DOCS = ["# Manual\n\nPress the reset button for five seconds.\n", "## Lights\n\nBlue means ready.\n"]
FAST = WarmOptions(timeout=2.0, retries=0, backoff=0.01)


def write_recipes(root: Path, *, render: str = "chat", docs: bool = False, yaml_tool: bool = False) -> Path:
    d = root / "recipes"
    (d / "parts").mkdir(parents=True)
    (d / "parts" / "system.md").write_text(SYSTEM)
    if yaml_tool:
        (d / "parts" / "tool.yaml").write_text(
            "name: lookup_order\ndescription: Find an order by number.\n"
            "parameters: {type: object, properties: {n: {type: string}}}\n"
        )
        tool = "parts/tool.yaml"
    else:
        (d / "parts" / "tool.json").write_text(json.dumps(TOOL, indent=2))
        tool = "parts/tool.json"
    entry = f"  - name: acme\n    version: 2\n    render: {render}\n    system: {{file: parts/system.md}}\n    tools: [{tool}]\n"
    if docs:
        for i, text in enumerate(DOCS):
            (d / "parts" / f"doc{i}.md").write_text(text)
        entry += "    documents: [{glob: 'parts/doc*.md'}]\n"
    (d / "acme.yaml").write_text("prefixes:\n" + entry)
    return d


def expected_prefix(question_lead: str = "") -> list[int]:
    """The fake's rendering of system + tool + user(lead + question), cut where the question starts."""
    marker = "\x00"
    text = chat_text(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question_lead + marker}], [TOOL]
    )
    return char_tokenize(text[: text.index(marker)])


def rows() -> list[dict]:
    with open_store() as s:
        return s.warm_runs()


def test_recipe_form_parses_tools_and_leads_user_message_with_documents(tmp_path: Path) -> None:
    (recipe,) = load_recipes(write_recipes(tmp_path, docs=True, yaml_tool=True))
    form = recipe_form(recipe)
    assert form.mode == "chat" and form.messages == ({"role": "system", "content": SYSTEM},)
    assert form.tools == (TOOL,)  # a bare YAML {name, parameters} schema is wrapped as a function tool
    assert form.user_lead == "".join(DOCS)
    msgs, tools = form.chat("Q?")
    assert msgs[-1] == {"role": "user", "content": "".join(DOCS) + "Q?"} and tools == [TOOL]
    (recipe,) = load_recipes(write_recipes(tmp_path / "c", render="completion", docs=True))
    form = recipe_form(recipe)
    assert form.mode == "completion" and form.prompt_lead == SYSTEM + json.dumps(TOOL, indent=2) + "".join(DOCS)


def test_warm_recipes_on_fake_renders_with_server_tokenizer_and_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rdir = write_recipes(tmp_path)
    with FakeEngine("vllm", block_size=16) as a:
        code = main(["warm", "--recipes", str(rdir), "--endpoint", a.url, "--json", "-", "--retries", "0"])
        out = json.loads(capsys.readouterr().out)
        sent = [b["prompt"] for m, p, b, _ in a.requests if p == "/v1/completions"]
        # The server's own /tokenize rendered the recipe (chat messages + tools).
        assert any(p == "/tokenize" and b and "messages" in b for _, p, b, _ in a.requests)
        prefix = expected_prefix()
        assert code == ExitCode.OK and out["status"] == "ready", out
        assert sent[0] == prefix + [prefix[-1]]  # exactly the shared prefix (+ the last-token extra)
        # A real request: same system + tools, a new question, reuses the block-aligned prefix.
        import httpx

        r = httpx.post(
            a.url + "/v1/chat/completions",
            json={
                "model": "fake-model",
                "max_tokens": 1,
                "tools": [TOOL],
                "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Where is order 7?"}],
            },
        )
        cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    aligned = len(prefix) // 16 * 16
    assert cached >= aligned > 0
    assert out["replicas"][0]["tokenizer_check"] == "match"
    got = rows()
    assert [(x["key"], x["version"], x["status"], x["tokens"]) for x in got] == [
        ("acme@v2", 2, "verified", len(prefix))
    ]


def test_recipe_documents_and_completion_mode_cut_before_the_question(tmp_path: Path) -> None:
    with FakeEngine("vllm", block_size=8) as a:
        ep = Endpoint(a.url)
        rec = source_from_recipes(load_recipes(write_recipes(tmp_path, docs=True)), endpoint=ep)
        (cand,) = rec.candidates
        assert list(cand.token_ids) == expected_prefix("".join(DOCS))
        from prefixplan.render.vllm_remote import VLLMRenderer

        recipe = load_recipes(tmp_path / "recipes")[0]
        assert render_recipe(recipe, VLLMRenderer(a.url)).cut == "common prefix"
        rec2 = source_from_recipes(
            load_recipes(write_recipes(tmp_path / "c", render="completion", docs=True)), endpoint=ep
        )
        assert list(rec2.candidates[0].token_ids) == char_tokenize(SYSTEM + json.dumps(TOOL, indent=2) + "".join(DOCS))
        assert rec.tokenizer is not None and list(rec.tokenizer.probe_ids or ()) == char_tokenize(TOKENIZER_PROBE_TEXT)
        rep = run_warm(plan_from_record(rec), [ep], FAST)
        assert rep.status == "ready" and rep.results[0].cached_tokens >= len(cand.token_ids) // 8 * 8


def test_recipes_lock_mismatch_is_skipped_and_keys_filter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rdir = write_recipes(tmp_path)
    lock = tmp_path / "prefixplan.lock"
    assert main(["lock", "--recipes", str(rdir), "--lock", str(lock), "--no-store"]) == 0
    capsys.readouterr()
    with FakeEngine("vllm") as a:
        code = main(
            ["warm", "--recipes", str(rdir), "--lock", str(lock), "--endpoint", a.url, "--dry-run", "--json", "-"]
        )
        plan = json.loads(capsys.readouterr().out)["plan"]
        assert code == 0 and [i["key"] for i in plan["items"]] == ["acme@v2"] and not plan["skipped"]
        (rdir / "parts" / "system.md").write_text(SYSTEM + " Edited without a version bump.")
        code = main(
            ["warm", "--recipes", str(rdir), "--lock", str(lock), "--endpoint", a.url, "--dry-run", "--json", "-"]
        )
        plan = json.loads(capsys.readouterr().out)["plan"]
        assert not plan["items"] and "differs from the lock" in plan["skipped"][0]["reason"]
        assert (
            main(["warm", "--recipes", str(rdir), "--keys", "nope@v1", "--endpoint", a.url, "--dry-run"])
            == ExitCode.USAGE
        )


def test_recipes_need_a_tokenizer_or_an_endpoint(tmp_path: Path) -> None:
    rdir = write_recipes(tmp_path)
    assert main(["warm", "--recipes", str(rdir), "--dry-run"]) == ExitCode.USAGE
    with pytest.raises(UsageError, match="no tokenizer"):
        source_from_recipes(load_recipes(rdir))


def test_generic_server_without_token_prompts_warms_recipes_through_chat(tmp_path: Path) -> None:
    rdir = write_recipes(tmp_path)
    with FakeEngine("openai", block_size=16, token_prompts=False) as a:
        rec = source_from_recipes(load_recipes(rdir), endpoint=Endpoint(a.url))
        rep = run_warm(plan_from_record(rec), [Endpoint(a.url)], WarmOptions(timeout=2.0, retries=0, block_size=16))
        chats = [b for _, p, b, _ in a.requests if p == "/v1/chat/completions"]
    r = rep.results[0]
    assert rep.status == "ready" and (r.status, r.via, r.method) == ("verified", "chat", "usage")
    assert r.cached_tokens >= r.expected_cached == len(expected_prefix()) // 16 * 16
    assert [c["messages"][-1]["content"] for c in chats] == [WARM_QUESTION, PROBE_QUESTION]
    assert all(c["tools"] == [TOOL] and c["max_tokens"] == 1 and "tool_choice" not in c for c in chats)
    # A server that reports no cached tokens (and has no counters): unverified, never ready.
    with FakeEngine("openai", token_prompts=False, report_cached=False) as a:
        rec = source_from_recipes(load_recipes(rdir), endpoint=Endpoint(a.url))
        rep = run_warm(plan_from_record(rec), [Endpoint(a.url)], FAST)
    assert rep.results[0].status == "unverified" and rep.status == "failed" and rep.exit_code == ExitCode.FINDINGS


def test_analysis_candidate_warms_through_its_example_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "log.jsonl"
    reqs = [
        {
            "model": "fake-model",
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Question {i}?"}],
            "tools": [TOOL],
        }
        for i in range(3)
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    prefix = expected_prefix()
    parts = [{"kind": "system", "tokens": 10, "text": "You are"}, {"kind": "tool", "tokens": 5, "text": "lookup_order"}]
    cands = [
        {
            "rank": 1,
            "name": "acme",
            "key": "acme@v1",
            "length": len(prefix),
            "token_ids": prefix,
            "marginal_tokens": 100,
            "parent": None,
            "parts": parts,
            "example": {"source": str(log), "line": 2},
        },
        {
            "rank": 2,
            "name": "conv",
            "key": None,
            "length": 40,
            "token_ids": [99] * 40,
            "marginal_tokens": 10,
            "parent": None,
            "parts": parts + [{"kind": "user", "tokens": 20, "text": None}],
            "example": {"source": str(log), "line": 3},
        },
    ]
    record = {
        "schema_version": 1,
        "tokenizer": {"spec": "fake:char", "probe_ids": char_tokenize(TOKENIZER_PROBE_TEXT)},
        "granularity": {"block_size": 16},
        "candidates": cands,
    }
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(record))
    with FakeEngine("openai", token_prompts=False) as a:
        code = main(
            [
                "warm",
                "--analysis",
                str(rec),
                "--endpoint",
                a.url,
                "--block-size",
                "16",
                "--retries",
                "0",
                "--json",
                str(tmp_path / "o.json"),
            ]
        )
        chats = [b for _, p, b, _ in a.requests if p == "/v1/chat/completions"]
    out = json.loads((tmp_path / "o.json").read_text())
    by = {r["rank"]: r for r in out["results"]}
    table = capsys.readouterr().out
    assert code == ExitCode.FINDINGS and out["status"] == "partial" and "via" in table and "chat" in table
    assert (by[1]["status"], by[1]["via"]) == ("verified", "chat") and by[1]["cached_tokens"] >= len(prefix) // 16 * 16
    assert (
        by[2]["status"] == "failed"
        and "token-id prompt rejected" in by[2]["error"]
        and "user content" in by[2]["error"]
    )
    assert chats[0]["messages"][0] == {"role": "system", "content": SYSTEM} and chats[0]["tools"] == [TOOL]
    assert [r["data"]["via"] for r in rows()] == ["chat", None]


def test_form_from_request_rules() -> None:
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    from prefixplan.analysis.record import CandidatePart as P

    form, why = form_from_request(msgs, [TOOL], [P("template", 1), P("system", 1), P("tool", 1, "lookup_order")])
    assert form == PromptForm(mode="chat", messages=({"role": "system", "content": "S"},), tools=(TOOL,)) and not why
    assert form_from_request(msgs, [TOOL], [P("tool", 1, "other")])[0] is None
    assert "user" in form_from_request(msgs, None, [P("system", 1), P("user", 1)])[1]
    assert PromptForm.from_dict(form.to_dict()) == form


def test_via_ids_never_falls_back_and_via_chat_forces_chat(tmp_path: Path) -> None:
    rdir = write_recipes(tmp_path)
    with FakeEngine("openai", token_prompts=False) as a:
        rec = source_from_recipes(load_recipes(rdir), endpoint=Endpoint(a.url))
        rep = run_warm(plan_from_record(rec), [Endpoint(a.url)], WarmOptions(timeout=2.0, retries=0, via="ids"))
        assert rep.results[0].status == "failed" and "HTTP 400" in (rep.results[0].error or "")
    with FakeEngine("vllm") as a:  # even a vLLM can be warmed through chat on request
        rec = source_from_recipes(load_recipes(rdir), endpoint=Endpoint(a.url))
        rep = run_warm(plan_from_record(rec), [Endpoint(a.url)], WarmOptions(timeout=2.0, retries=0, via="chat"))
        assert rep.status == "ready" and rep.results[0].via == "chat"
        assert not [p for _, p, _, _ in a.requests if p == "/v1/completions"]
    with pytest.raises(UsageError, match="--via"):
        run_warm(plan_from_record(rec), [Endpoint("http://127.0.0.1:1")], WarmOptions(via="bogus"))


def test_probe_ids_preferred_when_the_spec_cannot_be_loaded() -> None:
    probe = char_tokenize(TOKENIZER_PROBE_TEXT)
    ids = list(range(100, 164))
    base = {
        "schema_version": 1,
        "granularity": {"block_size": 16},
        "candidates": [{"rank": 1, "name": "p", "length": 64, "token_ids": ids, "marginal_tokens": 1}],
    }
    unloadable = {"spec": "hf:/nonexistent/tokenizer", "label": "gone", "fingerprint": "fp-gone"}
    with FakeEngine("vllm") as a:
        rep = run_warm(
            plan_from_record(dict(base, tokenizer=dict(unloadable, probe_ids=probe))), [Endpoint(a.url)], FAST
        )
        assert rep.replicas[0].tokenizer_check == "match" and rep.status == "ready"
        rep = run_warm(plan_from_record(dict(base, tokenizer=unloadable)), [Endpoint(a.url)], FAST)
        assert rep.replicas[0].tokenizer_check.startswith("unchecked: cannot load the analysis tokenizer")
    with FakeEngine("vllm", tokenizer_offset=3) as a:  # stored probe ids still catch another tokenizer
        rep = run_warm(
            plan_from_record(dict(base, tokenizer=dict(unloadable, probe_ids=probe))), [Endpoint(a.url)], FAST
        )
        assert rep.replicas[0].tokenizer_check == "mismatch" and rep.exit_code == ExitCode.ENDPOINT
