"""Cache-breaker lint: dates, UUIDs, ids, numbers, key order and tool order, with position and cost."""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from prefixplan.analysis.dynamic import estimate_tokens, line_col
from prefixplan.gate.lint import lint_prefix, lint_text, lint_tool_variants, lint_variants

ROOT = Path(__file__).resolve().parent.parent

SYSTEM = (
    "You are Pia, the support assistant of Fernweh Outdoor.\n"
    "Today is Monday, March 3, 2025 and the time is 14:05:33 UTC.\n"
    "Conversation id: 3f2b1c9e-0a4b-4c1d-9e7f-1234567890ab (request req_8f2c91ab77d04e).\n"
    "Nonce 83749201857 for this session.\n"
    "Returns are free within 30 days. Firmware 2.4.1 is current. Hold reset for 10 seconds.\n"
)


def _one(findings, code, match):  # type: ignore[no-untyped-def]
    hits = [f for f in findings if f.code == code and f.match == match]
    assert len(hits) == 1, [(f.code, f.match) for f in findings]
    return hits[0]


def test_finds_each_breaker_with_position_and_cost() -> None:
    findings = lint_text(SYSTEM, part="system")
    date = _one(findings, "date-time", "Monday, March 3, 2025")
    assert (date.line, date.column, date.offset) == (2, 10, SYSTEM.index("Monday"))
    assert date.cost_tokens == math.ceil((len(SYSTEM) - date.offset) / 4) and not date.cost_exact
    clock = _one(findings, "date-time", "14:05:33 UTC")
    assert clock.line == 2 and clock.offset == SYSTEM.index("14:05")
    # id-like values may be credentials: shown masked (first 4 characters and the length), never in full
    uuid = _one(findings, "uuid", "3f2b…(36 chars)")
    assert (uuid.line, uuid.column) == (3, SYSTEM.splitlines()[2].index("3f2b") + 1)
    _one(findings, "request-id", "req_…(18 chars)")
    _one(findings, "long-number", "8374…(11 chars)")
    for full in ("3f2b1c9e-0a4b-4c1d-9e7f-1234567890ab", "req_8f2c91ab77d04e", "83749201857"):
        assert not [f for f in findings if full in f.match or full in f.message]
    # ordinary numbers and versions are not breakers
    assert not [f for f in findings if f.line == 5]
    # costs shrink the later the breaker sits
    costs = [f.cost_tokens for f in sorted(findings, key=lambda f: f.offset)]
    assert costs == sorted(costs, reverse=True)
    assert "recomputed" in date.message and "~" in date.message


@pytest.mark.parametrize(
    "text, code",
    [
        ("Current date: 2025-03-01", "date-time"),
        ("now=2025-03-01T10:00:00Z", "date-time"),
        ("as of 3 Mar 2025 we", "date-time"),
        ("on 03/07/2025 ok", "date-time"),
        ("today is Friday.", "date-time"),
        ("at 9:30 pm sharp", "date-time"),
        ("epoch 1719834000 now", "date-time"),
        ("id 9E7F1C2A-0A4B-4C1D-9E7F-1234567890AB", "uuid"),
        ("trace=4bf92f3577b34da6a3ce929d0e0e4736", "request-id"),
        ("session_A1b2C3d4E5f6 x", "request-id"),
        ("seed 123456789012", "long-number"),
    ],
)
def test_patterns(text: str, code: str) -> None:
    assert [f.code for f in lint_text(text)] == [code]


@pytest.mark.parametrize(
    "text", ["Use version 2.4.1 of the API.", "Keep 30 days; call 10 times.", "sha of the empty string"]
)
def test_no_false_positives(text: str) -> None:
    assert lint_text(text) == []


def test_prefix_cost_counts_later_parts_and_ignore() -> None:
    parts = [("system", "Today is 2025-03-01.\n"), ("tool[0] t.json", '{"name":"x"}' * 10)]
    f = lint_prefix(parts)[0]
    assert f.prefix_offset == 9 and f.cost_tokens == math.ceil((len(parts[0][1]) - 9 + 120) / 4)
    assert lint_prefix(parts, ignore=["date-time"]) == []
    exact = lint_prefix(parts, counter=lambda s: len(s.split()))[0]
    assert exact.cost_exact and exact.cost_tokens == len(("2025-03-01.\n" + '{"name":"x"}' * 10).split())


def test_line_col() -> None:
    assert line_col("ab\ncd", 0) == (1, 1)
    assert line_col("ab\ncd", 4) == (2, 2)
    assert estimate_tokens("abcde") == (2, False)


def test_key_order_and_tool_order_across_variants() -> None:
    a = '{"type":"function","function":{"name":"lookup","parameters":{"order":1,"email":2}}}'
    b = '{"type":"function","function":{"name":"lookup","parameters":{"email":2,"order":1}}}'
    c = '{"type":"function","function":{"name":"refund"}}'
    findings = lint_tool_variants({"req-1": [a, c], "req-2": [b, c], "req-3": [c, a]}, lineage="support-tools")
    key_order = [f for f in findings if f.code == "key-order"]
    assert len(key_order) == 1
    ko = key_order[0]
    # first differing character: just inside the first reordered key
    assert ko.part == "req-2 tool[0]" and ko.offset == b.index('"email"') + 1 == a.index('"order"') + 1
    assert ko.match == "$.function.parameters: ['email', 'order']"
    assert ko.cost_tokens == math.ceil((len(b) - ko.offset + len(c)) / 4)
    tool_order = [f for f in findings if f.code == "tool-order"]
    assert len(tool_order) == 1 and tool_order[0].part == "req-3 tool[0]"
    assert tool_order[0].cost_tokens == math.ceil((len(c) + len(a)) / 4)
    # a real content change is not a key-order finding; identical variants give nothing
    d = '{"type":"function","function":{"name":"lookup","parameters":{"order":1,"email":3}}}'
    assert lint_tool_variants({"x": [a], "y": [d]}) == []
    assert lint_tool_variants({"x": [a], "y": [a]}) == []


def test_variants_diverging_early() -> None:
    body = "You are the Acme support assistant. Cite the policy section. " * 20
    v1 = "Current time: 2026-11-28 09:00:06 UTC\n" + body
    v2 = "Current time: 2026-11-28 09:05:41 UTC\n" + body
    unrelated = "Translate legal contracts from German into English, clause by clause. " * 20
    f = lint_variants({"a": v1, "b": v2, "c": unrelated})
    assert len(f) == 1
    assert (f[0].part, f[0].line, f[0].offset) == ("b", 1, v1.index("09:00:06") + 4)
    assert "ISO date/time" in f[0].message and f[0].cost_tokens == math.ceil((len(v2) - f[0].offset) / 4)


def _example_requests() -> list[dict]:  # type: ignore[type-arg]
    path = ROOT / "examples" / "agent_log.jsonl.gz"
    if not path.exists():
        pytest.skip("examples/agent_log.jsonl.gz not generated")
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # the example has planted malformed lines
            req = rec.get("request") if isinstance(rec, dict) else None
            if isinstance(req, dict):
                out.append(req)
    return out


def test_example_log_planted_date_is_reported() -> None:
    systems = {}
    for req in _example_requests():
        for m in req.get("messages") or []:
            if isinstance(m, dict) and m.get("role") == "system" and isinstance(m.get("content"), str):
                systems.setdefault(m["content"], None)
    dated = {}
    for text in systems:
        hits = [f for f in lint_text(text, part="system") if f.code == "date-time"]
        if hits:
            dated[text] = hits[0]
    assert dated, "the example log's planted date was not found"
    text, f = next(iter(dated.items()))
    assert f.line == 1 and f.offset < 40  # the date sits on the first line of the prompt
    assert f.cost_tokens == math.ceil((len(text) - f.offset) / 4) > 50
    # all dated variants differ only there: the divergence check reports it too
    variants = dict([(f"v{i}", t) for i, t in enumerate(dated)][:5])
    if len(variants) > 1:
        div = lint_variants(variants)
        assert div and all(d.line == 1 for d in div)


def test_example_log_tool_key_order_is_reported() -> None:
    groups: dict[tuple[str, ...], dict[str, list[str]]] = defaultdict(dict)
    for i, req in enumerate(_example_requests()):
        tools = req.get("tools")
        if not isinstance(tools, list) or not tools or not all(isinstance(t, dict) for t in tools):
            continue
        names = tuple(sorted(str((t.get("function") or t).get("name")) for t in tools))
        texts = [json.dumps(t) for t in tools]  # key order as logged
        groups[names].setdefault(json.dumps(texts), texts)
    codes = set()
    for variants in groups.values():
        labelled = {f"variant{i}": v for i, v in enumerate(variants.values())}
        codes.update(f.code for f in lint_tool_variants(labelled))
    assert codes & {"key-order", "tool-order"}
