"""The chat template's sandbox shortcuts (prefixplan/render/sandbox_memo.py) change nothing the
template sees: the same texts for generated conversations with each shipped template, and the
same refusals of unsafe attributes, as the sandbox without them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from incremental_cases import conversations, prefixes

from prefixplan.render import sandbox_memo

ROOT = Path(__file__).resolve().parent.parent
TOKENIZERS = ROOT / ".cache" / "tokenizers"


def _tokenizer(name: str) -> Any:
    from transformers import AutoTokenizer

    folder = TOKENIZERS / name
    if name == "qwen3":
        from tests.conftest import qwen3_dir

        folder = qwen3_dir() or folder
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"{name} tokenizer not fetched: run python scripts/fetch_tokenizers.py")
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def _both(template: str, render: Any) -> tuple[Any, Any]:
    """``render()`` with the shortcuts installed and without (the sandbox's own methods): each
    result, or the exception's type and message (object addresses left out: each render makes
    its own objects)."""
    out = []
    for on in (True, False):
        if on:
            assert sandbox_memo.install(template)
        else:
            sandbox_memo.remove(template)
        try:
            out.append(_addressless(render()))
        except Exception as exc:
            out.append((type(exc), _addressless(str(exc))))
    sandbox_memo.install(template)
    return out[0], out[1]


def _addressless(value: Any) -> Any:
    if isinstance(value, list):
        return [_addressless(v) for v in value]
    return re.sub(r" at 0x[0-9a-f]+", "", value) if isinstance(value, str) else value


@pytest.mark.parametrize("name", ["qwen3", "llama3", "deepseek_v3"])
def test_generated_conversations_render_the_same(name: str) -> None:
    tok = _tokenizer(name)
    template = tok.chat_template
    assert isinstance(template, str)
    tools = name == "qwen3"

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(conversation=conversations(tools=tools, tool_calls=tools))
    def check(conversation: dict[str, Any]) -> None:
        batch = prefixes(conversation)

        def render() -> Any:
            return tok.apply_chat_template(
                [case["messages"] for case in batch],
                tools=conversation["tools"],
                add_generation_prompt=True,
                tokenize=False,
            )

        fast, sandbox = _both(template, render)
        assert fast == sandbox

    check()


UNSAFE = [
    "{{ messages.append }}",
    "{{ messages.pop() }}",
    "{{ messages[0].clear() }}",
    "{{ messages[0].update({'a': 1}) }}",
    "{{ messages[0].__class__ }}",
    "{{ messages[0].__class__.__mro__ }}",
    "{{ messages[0].content.__class__ }}",
    "{{ messages[0].content.format('x') }}{{ messages[0].content.format_map({}) }}",
    "{{ '{0.__class__}'.format(messages) }}",
    "{% for m in messages %}{{ loop.__class__ }}{{ loop.__init__ }}{{ loop._length }}{% endfor %}",
    "{% set ns = namespace(a=1) %}{{ ns.__init__ }}{{ ns._Namespace__attrs }}{{ ns.a }}",
    "{{ messages[0].items }}{{ messages[0].missing }}{{ messages[0].role }}{{ messages[0]['items'] }}",
    "{{ messages[0] | attr('role') }}{{ messages[0] | attr('keys') }}",
    "{{ messages[0].get('role') }}{{ messages[0].keys() | list }}{{ (messages | length).real }}",
    "{{ raise_exception.__globals__ }}",
    "{{ cycler.__init__.__globals__ }}",
    "{% set d = {'role': 'x', 'items': 'y'} %}{{ d.role }}{{ d.items }}{{ d.nope is defined }}",
]


@pytest.mark.parametrize("template", UNSAFE)
def test_unsafe_attributes_refused_alike(template: str) -> None:
    """Mutating methods, dunder and private attributes (through dicts, strings, the loop, a
    namespace, str.format and functions) are refused with the same error, and allowed ones give
    the same text, with the shortcuts as without."""
    from transformers.utils import chat_template_utils

    def render() -> Any:  # the compiled template apply_chat_template renders (every supported version)
        conversation = [{"role": "user", "content": "hi {0}", "items": "shadowed"}]  # fresh: some jinja2
        compiled = chat_template_utils._compile_jinja_template(template)  # versions let pop() run
        return compiled.render(messages=conversation, add_generation_prompt=True)

    fast, sandbox = _both(template, render)
    assert fast == sandbox


def test_installed_where_the_renderer_loads_a_template():
    from prefixplan.render.hf import HFRenderer

    folder = TOKENIZERS / "llama3"
    if not (folder / "tokenizer.json").is_file():
        pytest.skip("llama3 tokenizer not fetched")
    for _ in range(2):  # the first load makes the folder's snapshot, the second renders from it
        renderer = HFRenderer(folder)
        env = (
            renderer.template.environment
            if renderer.template is not None
            else sandbox_memo._environment(renderer.tokenizer.chat_template)
        )
        assert env is not None and "getattr" in vars(env) and "is_safe_attribute" in vars(env)
