"""The analyze pipeline end to end: exact reuse accounting, RAG what-if vs reality, cache
breakers, privacy, malformed input, namespaces, CLI behaviour."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from oracles.prompts import iter_prompts

from prefixplan.api import analyze, source_options
from prefixplan.cli.app import main
from prefixplan.core.granularity import reusable_prefix
from prefixplan.logs import LineErrors

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"
DOCS_FIRST = ROOT / "examples" / "agent_log.docs-first.jsonl.gz"


def _write(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


SYSTEM = "You are the Acme assistant. " * 40
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Find an order by id.",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
        },
    }
]


def _chat(user: str, who: str, *, system: str = SYSTEM, tools=TOOLS, model: str = "m") -> dict:
    body = {
        "model": model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "user": who,
    }
    if tools:
        body["tools"] = tools
    return body


@pytest.fixture(scope="module")
def example():
    if not EXAMPLE.is_file():
        pytest.skip("examples/agent_log.jsonl.gz missing")
    return analyze(str(EXAMPLE), top=50)


def test_reuse_equals_bruteforce_oracle(tmp_path):
    rows = [_chat(f"question number {i} " * (i % 5 + 1), f"u{i % 3}") for i in range(12)]
    rows += [_chat("other system", "u9", system="A different assistant. " * 30, tools=None)] * 2
    log = _write(tmp_path / "log.jsonl", rows)
    for block in (1, 16, 64):
        result = analyze(str(log), block_size=block, rag_whatif=False, capacities=(1e3,))
        prompts = [p.tokens for p in iter_prompts(source_options(str(log)), LineErrors())]
        expected = 0
        for i, toks in enumerate(prompts):
            best = 0
            for prev in prompts[:i]:
                n = min(len(prev), len(toks))
                neq = np.nonzero(prev[:n] != toks[:n])[0]
                best = max(best, int(neq[0]) if neq.size else n)
            expected += reusable_prefix(best, len(toks), block)
        assert result.to_json()["summary"]["reusable_tokens"] == expected
        # the simulator's unbounded persistent cache agrees with the tree
        sim = result.to_json()["simulation"]
        persistent = next(r for r in sim["runs"] if r["label"] == sim["persistent"])
        assert persistent["hit_tokens"] == expected
        assert result.to_json()["summary"]["prompt_tokens"] == sum(len(t) for t in prompts)
        assert result.to_json()["granularity"]["block_size"] == block
        assert result.to_json()["summary"]["distinct_tenants"] == 4  # u0, u1, u2, u9


def test_candidates_are_labelled_and_nested(tmp_path):
    rows = [_chat(f"q{i}", f"u{i}") for i in range(6)] + [_chat(f"r{i}", f"u{i}", tools=None) for i in range(4)]
    log = _write(tmp_path / "log.jsonl", rows)
    rec = analyze(str(log), rag_whatif=False).to_json()
    labels = {c["label"] for c in rec["candidates"]}
    assert "system+tools" in labels or "tools" in labels
    for c in rec["candidates"]:
        assert c["length"] % 16 == 0
        assert c["marginal_tokens"] <= c["reusable_tokens"]
        if c["parent"] is not None:
            parent = next((p for p in rec["candidates"] if p["rank"] == c["parent"]), None)
            assert parent is None or parent["length"] < c["length"]
    assert sum(c["marginal_tokens"] for c in rec["candidates"]) == rec["summary"]["shared_prefix_tokens"]


def test_privacy_withholds_single_user_prefixes(tmp_path):
    secret = "my account number is 99-12345 and my address is 1 Secret Lane. " * 10
    rows = [
        {"model": "m", "user": "alice", "messages": [{"role": "user", "content": secret + "first"}]},
        {"model": "m", "user": "alice", "messages": [{"role": "user", "content": secret + "second"}]},
    ]
    log = _write(tmp_path / "log.jsonl", rows)
    rec = analyze(str(log), min_tokens=16).to_json()
    assert rec["candidates"], "the shared user text is a candidate"
    for c in rec["candidates"]:
        assert c["tenants"] == 1 and c["withheld"]
        assert c["token_ids"] is None and c["preview"] is None
    assert "Secret Lane" not in json.dumps(rec)
    # two distinct users: ids may be recorded, but user text is still not previewed
    rows[1]["user"] = "bob"
    _write(log, rows)
    rec = analyze(str(log), min_tokens=16).to_json()
    c = rec["candidates"][0]
    assert not c["withheld"] and c["token_ids"]
    assert "Secret Lane" not in json.dumps(rec)
    rec = analyze(str(log), min_tokens=16, show_user_text=True).to_json()
    assert "my account number" in rec["candidates"][0]["preview"]


def test_namespaces_never_share(tmp_path):
    rows = [_chat("q1", "u1", model="a"), _chat("q2", "u2", model="b"), _chat("q3", "u3", model="a")]
    log = _write(tmp_path / "log.jsonl", rows)
    rec = analyze(str(log), rag_whatif=False).to_json()
    assert rec["summary"]["namespaces"] == 2
    assert all(c["hits"] == 2 and c["model"] == "a" for c in rec["candidates"])


def test_example_plants_are_found(example):
    rec = example.to_json()
    assert rec["summary"]["requests"] >= 300
    assert rec["errors"]["count"] == 4
    assert {e["line"] for e in rec["errors"]["samples"]} == {38, 75, 112, 149}
    date = [b for b in rec["breakers"] if b["kind"] == "dynamic-system"]
    assert date, "the planted timestamp in the support-bot system prompt is flagged"
    assert date[0]["pattern"] == "date-time" and date[0]["line"] == 1
    assert date[0]["cost_tokens"] > 10_000
    assert any(b["kind"] in ("tool-key-order", "tool-order") for b in rec["breakers"])
    labels = {c["label"] for c in rec["candidates"]}
    assert {"system", "system+tools"} <= labels


def test_rag_whatif_matches_reordered_log(example):
    if not DOCS_FIRST.is_file():
        pytest.skip("examples/agent_log.docs-first.jsonl.gz missing")
    whatif = example.to_json()["rag"]["whatif"]
    assert whatif["requests_rewritten"] > 0
    actual = analyze(str(DOCS_FIRST), rag_whatif=False).to_json()["summary"]
    assert actual["reusable_tokens"] == whatif["reusable_tokens"]
    assert whatif["gain_tokens"] > 0


def test_cli_reports_malformed_lines_and_strict(tmp_path, capsys):
    log = _write(
        tmp_path / "log.jsonl", [_chat("q1", "u1"), "{not json", _chat("q2", "u2"), "\xff\xfe garbage", "[1,2]"]
    )
    out = tmp_path / "rec.json"
    assert main(["analyze", str(log), "--no-store", "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["summary"]["requests"] == 2
    assert sorted(e["line"] for e in rec["errors"]["samples"]) == [2, 4, 5]
    text = capsys.readouterr().out
    assert f"{log}:2: bad JSON" in text
    assert main(["analyze", str(log), "--no-store", "--strict"]) == 2
    assert "log.jsonl:2" in capsys.readouterr().err


def test_cli_missing_file_and_bad_tokenizer(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "nope.jsonl"), "--no-store"]) == 2
    assert "nope.jsonl" in capsys.readouterr().err
    log = _write(tmp_path / "log.jsonl", [_chat("q1", "u1")])
    assert main(["analyze", str(log), "--no-store", "--tokenizer", "bogus:x"]) == 2
    assert "unknown scheme" in capsys.readouterr().err


def test_json_to_stdout_is_clean(tmp_path, capsys):
    log = _write(tmp_path / "log.jsonl", [_chat("q1", "u1"), _chat("q2", "u2")])
    assert main(["analyze", str(log), "--no-store", "--json", "-", "-q"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["schema_version"] == 1 and rec["tokenizer"]["spec"] == "mistral:nemo"
    assert rec["tokenizer"]["fingerprint"].startswith("tok1:")


def test_recorded_prefixes_get_lineage_keys(tmp_path):
    from prefixplan.store import open_store
    from prefixplan.store.register import register_analysis

    db = str(tmp_path / "pp.db")
    system_v1 = "You are the billing assistant of Acme. Explain invoices, refunds and plans precisely. " * 12
    system_v2 = system_v1.replace("precisely", "precisely and briefly", 1)
    other = "You write haiku about databases and nothing else, in lowercase. " * 12

    def run(system: str) -> dict:
        log = _write(tmp_path / "log.jsonl", [_chat(f"q{i}", f"u{i}", system=system, tools=None) for i in range(4)])
        record, _ = register_analysis(analyze(str(log), rag_whatif=False).record, db=db)
        return next(c for c in record.to_json()["candidates"] if c["label"] == "system")

    first = run(system_v1)
    assert first["key"] == f"{first['name']}@v1"
    edited = run(system_v2)
    assert edited["name"] == first["name"] and edited["key"] == f"{first['name']}@v2"
    unrelated = run(other)
    assert unrelated["name"] != first["name"] and unrelated["key"].endswith("@v1")
    with open_store(db) as store:
        statuses = {v.version: v.status for v in store.versions(first["name"])}
        assert statuses == {1: "superseded", 2: "active"}
        assert len(store.analyses()) == 3


def test_emit_recipes_puts_found_prefixes_under_the_gate(tmp_path):
    log = _write(tmp_path / "log.jsonl", [_chat(f"q{i}", f"u{i}") for i in range(4)])
    out = tmp_path / "recipes"
    assert main(["analyze", str(log), "--no-store", "-q", "--emit-recipes", str(out)]) == 0
    written = sorted(out.glob("*.yaml"))
    assert written
    lock = tmp_path / "prefixplan.lock"
    assert main(["lock", "--recipes", str(out), "--lock", str(lock), "--no-store"]) == 0
    assert main(["check", "--recipes", str(out), "--lock", str(lock)]) == 0
    system_file = next(out.glob("parts/*/system.txt"))
    assert system_file.read_text() == SYSTEM
    system_file.write_text(SYSTEM.replace("Acme", "Acme Corp", 1))
    assert main(["check", "--recipes", str(out), "--lock", str(lock)]) == 1


def test_emit_then_lock_on_the_same_store_is_one_version(tmp_path):
    """analyze registers name@v1 with the hash a recipe of the same parts has; locking the emitted
    recipe in the same store finds that version instead of conflicting with it."""
    from prefixplan.core.hashes import content_hash
    from prefixplan.store import open_store

    log = _write(tmp_path / "log.jsonl", [_chat(f"q{i}", f"u{i}") for i in range(4)])
    out, db, rec = tmp_path / "recipes", str(tmp_path / "pp.db"), tmp_path / "a.json"
    assert main(["analyze", str(log), "--db", db, "-q", "--emit-recipes", str(out), "--json", str(rec)]) == 0
    keyed = [c for c in json.loads(rec.read_text())["candidates"] if c["key"]]
    assert keyed
    tools = [json.dumps(t, ensure_ascii=False).encode() for t in TOOLS]
    expected = content_hash([("system", SYSTEM.encode()), *(("tool", t) for t in tools)])
    assert {c["content_hash"] for c in keyed if c["label"] == "system+tools"} == {expected}
    lock = tmp_path / "prefixplan.lock"
    assert main(["lock", "--recipes", str(out), "--lock", str(lock), "--db", db]) == 0
    assert main(["check", "--recipes", str(out), "--lock", str(lock)]) == 0
    with open_store(db) as store:
        for c in keyed:
            name = c["name"]
            (only,) = store.versions(name)  # lock added no second version under the name
            assert f"{name}@v{only.version}" == c["key"] and only.content_hash == c["content_hash"]
            assert only.token_hash == c["token_hash"]  # the exact tokens stay with it, for warm


def test_a_recurring_tool_result_counts_as_rag_out_of_history_not_user(qwen3_path) -> None:
    """Recurring document chunks are moved to rag from the segment that holds them: a tool
    result shared by several requests comes out of history, and no group goes negative."""
    from prefixplan.api import analyze

    doc = (
        "Order 4411 shipped on Monday from the Leipzig warehouse with two parcels. "
        "The carrier reports delivery within three working days to the given address. "
        "Returns are accepted for thirty days; the label is printed from the customer account page. "
        "Refunds reach the original payment method five to seven days after the parcel arrives."
    )
    requests = []
    for i in range(4):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "lookup", "arguments": {"order": 4411}}}
        requests.append(
            {
                "user": f"u{i}",
                "messages": [
                    {"role": "system", "content": "You are the shop's support assistant. Be brief."},
                    {"role": "user", "content": f"Where is my order, question {i}?"},
                    {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": f"c{i}", "content": doc},
                ],
            }
        )
    kinds = analyze(requests, tokenizer=f"hf:{qwen3_path}", simulate=False).record.kinds
    assert kinds["rag"]["tokens"] > 0
    assert all(v["tokens"] >= 0 and v["reused"] >= 0 for v in kinds.values()), kinds
    assert kinds["user"]["tokens"] > 0


def test_tool_breakers_say_whether_order_keys_or_content_vary(qwen3_path) -> None:
    from prefixplan.api import analyze

    def tool(description: str, key_first: str = "description") -> dict:
        fn = {"name": "get_weather", "description": description, "parameters": {"type": "object"}}
        if key_first == "parameters":
            fn = {"name": "get_weather", "parameters": fn["parameters"], "description": description}
        return {"type": "function", "function": fn}

    def log(tools: list[dict]) -> list[dict]:
        return [
            {"user": f"u{i}", "messages": [{"role": "user", "content": f"weather {i}?"}], "tools": [t]}
            for i, t in enumerate(tools)
        ]

    def kinds(tools: list[dict]) -> list[str]:
        record = analyze(log(tools), tokenizer=f"hf:{qwen3_path}", simulate=False, min_tenants=1).record
        return [b["kind"] for b in record.breakers]

    plan = "Current weather for a city, for customers on the {} plan."
    assert kinds([tool(plan.format("free")), tool(plan.format("pro"))] * 2) == ["tool-content"]
    assert kinds([tool(plan.format("free")), tool(plan.format("free"), "parameters")] * 2) == ["tool-key-order"]


def test_tool_breakers_are_the_same_when_the_tool_set_memo_starts_over(qwen3_path, monkeypatch) -> None:
    """A finder serialises each rendered tool set once (a bounded memo); a memo that keeps
    starting over gives the same breakers."""
    from prefixplan.analysis import breakers
    from prefixplan.api import analyze

    def fn(name: str, desc: str) -> dict:
        return {"type": "function", "function": {"name": name, "description": desc, "parameters": {"type": "object"}}}

    sets = [
        [fn("a", "first"), fn("b", "second")],
        [fn("b", "second"), fn("a", "first")],
        [fn("a", "first, changed"), fn("b", "second")],
        [fn("c", "third")],
    ]
    log = [
        {
            "user": f"u{i % 3}",
            "messages": [{"role": "user", "content": f"q {i}"}],
            "tools": sets[(i * 7) % 4 if i % 5 else 0],
        }
        for i in range(24)
    ]

    def found() -> list[dict]:
        return analyze(log, tokenizer=f"hf:{qwen3_path}", simulate=False, min_tenants=1).record.breakers

    whole = found()
    assert [(b["kind"], b["requests"], b["variants"]) for b in whole] == [("tool-order", 19, 3)]
    monkeypatch.setattr(breakers, "TOOL_SET_MEMO", 1)
    assert found() == whole


def test_a_trace_file_never_carries_tool_results_even_when_shown(tmp_path: Path, qwen3_path) -> None:
    from prefixplan.cli.app import main

    secret = "SSN 123-45-6789 belongs to Alice Example"
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    lines = []
    for i in range(3):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "lookup", "arguments": {"q": i}}}
        messages = [
            {"role": "system", "content": "You are the records assistant."},
            {"role": "user", "content": f"Look up person {i}."},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": secret},
        ]
        lines.append(json.dumps({"user": f"u{i}", "messages": messages, "tools": [tool]}))
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(lines) + "\n")
    trace = tmp_path / "t.parquet"
    argv = ["analyze", str(log), "-t", f"hf:{qwen3_path}", "--no-store", "-q", "--show-user-text"]
    assert main([*argv, "--trace-out", str(trace)]) == 0
    data = trace.read_bytes()
    assert b"You are the records assistant." in data and b"lookup" in data  # system text and tool names
    assert secret.encode() not in data
