"""Incremental ids equal a full encode, for every tokenizer family the project ships.

One renderer per family renders generated conversations (tests/incremental_cases.py: tool sets,
multi-turn, Unicode, whitespace at boundaries, documents) request by request, reusing what
earlier requests encoded; every request's ids must equal the reference computed from scratch:

- ``hf:`` (Qwen3, Llama 3 with its own template and with a template that puts the tools in the
  first user turn, DeepSeek V3): ``apply_chat_template(..., tokenize=True)``;
- ``mistral:`` (tekken, and SentencePiece with no proved cut): an untouched
  ``MistralTokenizer.encode_chat_completion``;
- ``tiktoken:`` (cl100k, o200k): the renderer's documented layout, each part encoded whole.

Families whose tokenizer file is not fetched are skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from incremental_cases import conversations, prefixes

from prefixplan.core.types import Request
from prefixplan.errors import TokenizerError

ROOT = Path(__file__).resolve().parent.parent
TOKENIZERS = ROOT / ".cache" / "tokenizers"
EXAMPLES = 40
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

# A Llama-3-style template of this project's own that writes the tool list into the first user
# turn, before the question, with no special token between them: the renderer must find the
# shared tool block as a prefix of that piece.
TOOLS_IN_FIRST_USER = (
    "{{ bos_token }}{% set ns = namespace(first=true) %}{% for m in messages %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' }}"
    "{% if m['role'] == 'user' and ns.first and tools %}{% set ns.first = false %}"
    "{{ 'Functions you may call:\\n\\n' }}{% for t in tools %}{{ t | tojson(indent=2) + '\\n\\n' }}{% endfor %}"
    "{% endif %}{{ m['content'] }}{{ '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


def _request(k: int, case: dict[str, Any]) -> Request:
    tools = case["tools"]
    return Request(
        source="gen",
        line_no=k + 1,
        id=str(k),
        format="openai-chat",
        messages=tuple(case["messages"]),
        tools=tuple(tools) if tools else None,
    )


def _check(renderer: Any, reference: Any, *, tools: bool = True, tool_calls: bool = True, reuse: bool = True) -> None:
    """Render generated conversations request by request; each equals ``reference(case)``
    (a list of ids, or the exception type the reference raised). With ``reuse``, some requests
    must have reused ids; without, every request must count as encoded in full."""
    before = renderer.encode_stats()

    @SETTINGS
    @given(conversation=conversations(tools=tools, tool_calls=tool_calls))
    def check(conversation: dict[str, Any]) -> None:
        for k, case in enumerate(prefixes(conversation)):
            try:
                expected: Any = list(reference(case))
            except Exception as exc:  # the reference rejects it: so must the renderer
                expected = type(exc)
            try:
                got: Any = renderer.render(_request(k, case)).tokens.tolist()
            except TokenizerError:
                got = TokenizerError
            if isinstance(expected, type):
                assert got is TokenizerError, case
            else:
                assert got == expected, case

    check()
    after = renderer.encode_stats()
    if reuse:
        assert after["incremental"] > before["incremental"], after  # ids were reused, not only encoded
    else:
        assert after["incremental"] == 0 and after["full"] > before["full"], after


def _hf_folder(name: str) -> Path:
    if name == "qwen3":
        from tests.conftest import qwen3_dir

        found = qwen3_dir()
        if found is not None:
            return found
    path = TOKENIZERS / name
    if not (path / "tokenizer.json").is_file():
        pytest.skip(f"{name} tokenizer not fetched: run python scripts/fetch_tokenizers.py")
    return path


@pytest.mark.parametrize(
    ("name", "template", "tools", "calls"),
    [
        ("qwen3", None, True, True),
        ("llama3", None, False, False),
        ("llama3", TOOLS_IN_FIRST_USER, True, False),
        ("deepseek_v3", None, False, False),
    ],
    ids=["qwen3", "llama3", "llama3-tools-in-user", "deepseek_v3"],
)
def test_hf_incremental_ids_equal_apply_chat_template(name: str, template: str | None, tools: bool, calls: bool):
    """DeepSeek V3 marks added tokens ``normalized`` without being special: splitting at them is
    not proved, so its prompts are encoded whole (and counted ``full``), with the same ids."""
    from prefixplan.render.hf import HFRenderer

    renderer = HFRenderer(_hf_folder(name), chat_template=template, incremental=True)
    proved = name != "deepseek_v3"
    assert renderer.encoder.incremental == proved
    assert (renderer.encoder.segments.rule is not None) == proved
    assert (renderer.encoder.words is not None) == proved  # new ASCII text is encoded word by word
    tok = renderer.tokenizer

    def reference(case: dict[str, Any]) -> list[int]:
        ids = tok.apply_chat_template(
            case["messages"], tools=case["tools"], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        return list(ids)

    _check(renderer, reference, tools=tools, tool_calls=calls, reuse=proved)


@pytest.mark.parametrize("name", ["nemo", "v3", "v7"])
def test_mistral_incremental_ids_equal_mistral_common(name: str):
    """tekken (nemo) is cut at proved boundaries; SentencePiece (v3, v7) has no proved rule, so
    its texts are only reused whole (a recurring system prompt, tool list or earlier turn)."""
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    from prefixplan.render.mistral import MODELS, MistralRenderer, _clean_message

    renderer = MistralRenderer(name, incremental=True)
    method, kwargs, _ = MODELS[name]
    untouched = getattr(MistralTokenizer, method)(**kwargs)

    def reference(case: dict[str, Any]) -> list[int]:
        messages: Any = [_clean_message(m) for m in case["messages"]]
        chat: Any = ChatCompletionRequest(messages=messages, tools=case["tools"])
        return list(untouched.encode_chat_completion(chat).tokens)

    _check(renderer, reference)


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_tiktoken_incremental_ids_equal_whole_parts(name: str):
    from prefixplan.render.tiktoken_backend import TiktokenRenderer

    try:
        renderer = TiktokenRenderer(name, incremental=True)
        whole = TiktokenRenderer(name, incremental=False)
    except TokenizerError:
        pytest.skip(f"{name}.tiktoken not fetched: run python scripts/fetch_tokenizers.py tiktoken")
    assert renderer.segments is not None and renderer.segments.rule is not None

    def reference(case: dict[str, Any]) -> list[int]:
        whole.cache.__init__(whole.cache.max_tokens)  # nothing reused: every part encoded whole
        return whole.render(_request(0, case)).tokens.tolist()

    _check(renderer, reference)
