"""Token equality with the real Qwen3 tokenizer and chat template (Must-show of issue 2).

The renderer's ids must equal ``apply_chat_template(messages, tools=tools,
add_generation_prompt=True, tokenize=True)`` for every case, both with segment reuse (the
piece cache) and with whole-request encoding.
"""

from __future__ import annotations

import itertools

import pytest
from chat_cases import cases

from prefixplan.core.types import Request
from prefixplan.render.hf import HFRenderer

CASES = cases()


def _request(i: int, case: dict) -> Request:
    return Request(
        source="cases",
        line_no=i + 1,
        id=str(i),
        format="openai-chat",
        messages=tuple(case["messages"]),
        tools=tuple(case["tools"]) if case["tools"] else None,
    )


@pytest.fixture(scope="module")
def renderers(qwen3_path):
    return HFRenderer(qwen3_path), HFRenderer(qwen3_path, split_pieces=False)


def test_case_count():
    assert len(CASES) >= 50


@pytest.mark.parametrize("i", range(len(CASES)))
def test_equals_apply_chat_template(renderers, i):
    split, whole = renderers
    case = CASES[i]
    expected = split.tokenizer.apply_chat_template(
        case["messages"], tools=case["tools"], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    req = _request(i, case)
    got_split = split.render(req)
    got_whole = whole.render(req)
    assert got_split.tokens.tolist() == list(expected)
    assert got_whole.tokens.tolist() == list(expected)
    # segments tile the prompt exactly
    segs = got_split.segments
    assert segs[0].start == 0 and segs[-1].end == len(expected)
    assert all(a.end == b.start for a, b in itertools.pairwise(segs))
    assert got_split.segments == got_whole.segments


def test_batch_rendering_equals_single(renderers):
    split, _ = renderers
    reqs = [_request(i, c) for i, c in enumerate(CASES)]
    batch = split.render_many(reqs)
    for req, prompt in zip(reqs, batch, strict=False):
        assert prompt.tokens.tolist() == split.render(req).tokens.tolist()
    assert split.cache.hits > 0  # shared system/tool pieces were reused


def test_segments_name_their_sources(renderers):
    split, _ = renderers
    case = {
        "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}],
        "tools": None,
    }
    p = split.render(_request(0, case))
    kinds = [s.kind for s in p.segments]
    assert kinds == ["template", "system", "template", "user", "template"]
    text = split.tokenizer.decode(p.tokens[p.segments[1].start : p.segments[1].end].tolist())
    assert text == "You are terse."


def test_paragraph_split_pieces_equal_whole_encoding(qwen3_path):
    """Long pieces are split after blank lines; ids and spans must not change."""
    paras = [
        "Intro paragraph with words.",
        "```python\nprint('x')\n```",
        "- bullet one\n- bullet two",
        "# Heading",
        "日本語の段落です。",
        "'quoted start",
        "12345 numbers",
        "<tag attr='1'>",
        "é accented start",
        "  indented start",
        "\ttab start",
        "e\u0301 combining start",
    ]
    body = "\n\n".join(p * 12 for p in paras) + "\n\n\n\ntrailing" + "\n\n"
    split = HFRenderer(qwen3_path)
    assert split._paragraph_split
    whole = HFRenderer(qwen3_path, split_pieces=False)
    for content in (body, body.replace("\n\n", "\r\n\r\n"), "x" * 2000 + "\n\n" + body):
        case = {
            "messages": [{"role": "system", "content": content}, {"role": "user", "content": content + " question"}],
            "tools": None,
        }
        expected = split.tokenizer.apply_chat_template(
            case["messages"], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        a, b = split.render(_request(0, case)), whole.render(_request(0, case))
        assert a.tokens.tolist() == list(expected) == b.tokens.tolist()
        assert a.segments == b.segments and a.chunks == b.chunks


def test_example_log_requests_equal_apply_chat_template(qwen3_path):
    """Real content (agent prompts, MCP/BFCL tools, Rust book chunks) from the bundled log."""
    from pathlib import Path

    from prefixplan.logs import LineErrors, ReadOptions, iter_requests

    log = Path(__file__).resolve().parent.parent / "examples" / "agent_log.jsonl.gz"
    if not log.is_file():
        pytest.skip("examples/agent_log.jsonl.gz missing")
    renderer = HFRenderer(qwen3_path)
    reqs = [r for _, r in zip(range(80), iter_requests([str(log)], ReadOptions(), LineErrors()), strict=False)]
    for req, prompt in zip(reqs, renderer.render_many(reqs), strict=False):
        expected = renderer.tokenizer.apply_chat_template(
            list(req.messages),
            tools=list(req.tools) if req.tools else None,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        assert prompt.tokens.tolist() == list(expected), f"line {req.line_no}"


def test_list_contents_and_string_arguments_are_labelled(renderers) -> None:
    """A list content reaches the template newline-joined (vLLM's normalisation) and a tool
    call's string arguments as the parsed object: both are found and labelled, not template."""
    fast, _ = renderers
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": "world"}]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Zürich"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    prompt = fast.render(Request(source="t", line_no=1, id="1", format="openai-chat", messages=tuple(messages)))
    kinds = {(s.kind, s.index) for s in prompt.segments}
    assert ("user", 0) in kinds and ("assistant", 1) in kinds and ("tool_result", 2) in kinds
    user = next(s for s in prompt.segments if s.kind == "user")
    text = fast.tokenizer.decode(prompt.tokens[user.start : user.end].tolist())
    assert text == "hello\nworld"


def test_tojson_memo_serialises_each_tool_once_per_batch(renderers, monkeypatch) -> None:
    """A batch that shares its tools serialises each tool once; every text is still what
    ``apply_chat_template`` gives the conversation alone."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    from prefixplan.render import tojson_memo

    split, _ = renderers
    env = (  # the environment the renderer renders with: its own, or transformers'
        split.template.environment
        if split.template is not None
        else _compile_jinja_template(split.tokenizer.chat_template).environment
    )
    filters = env.filters
    assert getattr(filters["tojson"], "__prefixplan_memo__", False)
    original = filters["tojson"].__wrapped__
    calls: list[object] = []

    def counting(x, *args, **kwargs):
        calls.append(x)
        return original(x, *args, **kwargs)

    monkeypatch.setitem(filters, "tojson", tojson_memo._memoised(counting))
    tools = next(c["tools"] for c in CASES if c["tools"] and len(c["tools"]) >= 2)
    reqs = [_request(i, {"messages": c["messages"], "tools": tools}) for i, c in enumerate(CASES[:20])]

    def tool_calls() -> int:  # transformers may pass copies of the tools: compare values
        return sum(any(x == t for t in tools) for x in calls)

    texts = split._render_texts(reqs, range(len(reqs)))
    assert tool_calls() == len(tools)
    for i, req in enumerate(reqs):
        alone = split.tokenizer.apply_chat_template(
            list(req.messages or ()), tools=list(tools), add_generation_prompt=True, tokenize=False
        )
        assert texts[i] == alone

    calls.clear()  # outside a memo scope every conversation serialises every tool again
    if split.template is not None:
        split.template.render_many([list(r.messages or ()) for r in reqs], list(reqs[0].tools or ()))
    else:
        split.tokenizer.apply_chat_template(
            [list(r.messages or ()) for r in reqs],
            tools=list(reqs[0].tools or ()),
            add_generation_prompt=True,
            tokenize=False,
        )
    assert tool_calls() == len(tools) * len(reqs)
