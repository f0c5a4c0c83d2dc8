"""An ``hf:`` folder loads from its snapshot without transformers and renders the same ids.

The first load of a folder goes through transformers and keeps a snapshot
(prefixplan/render/hf_snapshot.py); later loads rebuild the tokenizer with ``tokenizers`` and
render the template with prefixplan's own environment (prefixplan/render/hf_template.py).
Every check compares with transformers' ``apply_chat_template`` of the installed version.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from incremental_cases import conversations, prefixes

from prefixplan.core.types import Request
from prefixplan.errors import TokenizerError
from prefixplan.render import hf_snapshot, hf_template

ROOT = Path(__file__).resolve().parent.parent
TOKENIZERS = ROOT / ".cache" / "tokenizers"
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

needs_semantics = pytest.mark.skipif(
    not hf_template.semantics_available(),
    reason="renders as transformers 4 and 5 do; another version is installed",
)


def _folder(name: str) -> Path:
    if name == "qwen3":
        from tests.conftest import qwen3_dir

        found = qwen3_dir()
        if found is not None:
            return found
    if name == "tiny-qwen3":
        path = ROOT / ".cache" / "tiny-qwen3"
    else:
        path = TOKENIZERS / name
    if not (path / "tokenizer.json").is_file():
        pytest.skip(f"{name} tokenizer not fetched: run python scripts/fetch_tokenizers.py")
    return path


def _reference(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def _request(k: int, messages: list[dict[str, Any]], tools: Any) -> Request:
    return Request(
        source="gen",
        line_no=k + 1,
        id=str(k),
        format="openai-chat",
        messages=tuple(messages),
        tools=tuple(tools) if tools else None,
    )


def _from_snapshot(folder: Path, **kwargs: Any) -> Any:
    """A renderer of ``folder`` made from its snapshot (the first load makes it)."""
    from prefixplan.render.hf import HFRenderer

    HFRenderer(folder, **kwargs)
    renderer = HFRenderer(folder, **kwargs)
    assert renderer.template is not None, "rendered with transformers, not from the snapshot"
    assert renderer._tokenizer is None, "transformers was loaded"
    return renderer


@st.composite
def _extras(draw: st.DrawFn, conversation: dict[str, Any]) -> dict[str, Any]:
    """The conversation with keys set to null and reasoning fields here and there."""
    out = []
    for m in conversation["messages"]:
        m = dict(m)
        if draw(st.booleans()):
            m[draw(st.sampled_from(["name", "tool_calls", "reasoning_content", "extra"]))] = None
        if m["role"] == "assistant" and draw(st.booleans()):
            m[draw(st.sampled_from(hf_template.REASONING_FIELDS))] = draw(st.sampled_from(["Think.", "步骤\n"]))
        out.append(m)
    return {"messages": out, "tools": conversation["tools"]}


@needs_semantics
@pytest.mark.parametrize(
    ("name", "tools"), [("qwen3", True), ("llama3", False), ("deepseek_v3", False), ("tiny-qwen3", True)]
)
def test_ids_from_the_snapshot_equal_apply_chat_template(name: str, tools: bool) -> None:
    folder = _folder(name)
    reference = _reference(folder)
    if not reference.chat_template:  # chat_template.jinja is read from transformers 4.47 on
        pytest.skip(f"this transformers finds no chat template in {name}")
    renderer = _from_snapshot(folder)

    @SETTINGS
    @given(data=st.data(), conversation=conversations(tools=tools, tool_calls=tools))
    def check(data: st.DataObject, conversation: dict[str, Any]) -> None:
        conversation = data.draw(_extras(conversation))
        messages = conversation["messages"]
        after_tools = [  # requests that end with a tool result (the turn before it follows the last question)
            {"messages": messages[: k + 1], "tools": conversation["tools"]}
            for k, m in enumerate(messages)
            if m["role"] == "tool"
        ]
        for k, case in enumerate([*prefixes(conversation), *after_tools]):
            try:
                expected: Any = reference.apply_chat_template(
                    case["messages"], tools=case["tools"], add_generation_prompt=True, tokenize=True
                )
                if isinstance(expected, dict) or hasattr(expected, "keys"):
                    expected = expected["input_ids"]
                expected = list(expected)
            except Exception:  # the template rejects it: so must the renderer
                expected = TokenizerError
            try:
                got: Any = renderer.render(_request(k, case["messages"], case["tools"])).tokens.tolist()
            except TokenizerError:
                got = TokenizerError
            assert got == expected, case

    check()
    assert renderer._tokenizer is None  # every request rendered without transformers


@needs_semantics
def test_a_folder_renders_without_importing_transformers(tmp_path: Path) -> None:
    """A fresh process whose ``import transformers`` fails renders from the snapshot, with the
    ids transformers gives."""
    folder = _folder("qwen3")
    _from_snapshot(folder)
    stand_in = tmp_path / "stand_in" / "transformers"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text("raise ImportError('transformers was imported')\n")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello ✓"}]
    script = (
        "import json, sys\n"
        "from prefixplan.core.types import Request\n"
        "from prefixplan.render.hf import HFRenderer\n"
        f"r = HFRenderer({str(folder)!r})\n"
        f"req = Request(source='x', line_no=1, id='1', format='openai-chat', messages=tuple({messages!r}))\n"
        "print(json.dumps(r.render(req).tokens.tolist()))\n"
        "print('transformers' in sys.modules and sys.modules['transformers'] is not None)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(stand_in.parent), str(ROOT)]))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    ids_line, imported = done.stdout.strip().splitlines()[-2:]
    expected = _reference(folder).apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(expected, "keys"):
        expected = expected["input_ids"]
    assert json.loads(ids_line) == list(expected)
    assert imported == "False"


def _copy(folder: Path, tmp_path: Path) -> Path:
    out = tmp_path / "tok"
    out.mkdir()
    for name in hf_snapshot.TOKENIZER_FILES:
        if (folder / name).is_file():
            shutil.copy(folder / name, out / name)
    return out


@needs_semantics
def test_a_changed_template_file_makes_a_new_snapshot(tmp_path: Path) -> None:
    from prefixplan.render.hf import HFRenderer

    folder = _copy(_folder("llama3"), tmp_path)
    first = hf_snapshot.snapshot_path(folder)
    _from_snapshot(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}<<{{ m['content'] }}>>{% endfor %}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert hf_snapshot.snapshot_path(folder) != first
    renderer = HFRenderer(folder)
    req = _request(0, [{"role": "user", "content": "hi"}], None)
    assert renderer.render_text(req) == "<<hi>>"
    assert _from_snapshot(folder).render_text(req) == "<<hi>>"


@needs_semantics
def test_a_damaged_snapshot_is_made_again(tmp_path: Path) -> None:
    folder = _folder("llama3")
    _from_snapshot(folder)
    path = hf_snapshot.snapshot_path(folder)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # cut short
    assert hf_snapshot.read(folder) is None
    renderer = _reference_renderer(folder)
    assert renderer._tokenizer is not None  # loaded through transformers, then kept again
    assert hf_snapshot.read(folder) is not None
    assert _from_snapshot(folder).render_text(_request(0, [{"role": "user", "content": "x"}], None))


def _reference_renderer(folder: Path) -> Any:
    from prefixplan.render.hf import HFRenderer

    return HFRenderer(folder)


@needs_semantics
def test_an_unwritable_cache_still_renders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefixplan.render.hf import HFRenderer

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("PREFIXPLAN_CACHE_DIR", str(blocker))
    folder = _folder("llama3")
    messages = [{"role": "user", "content": "hello"}]
    expected = _reference(folder).apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    for _ in range(2):
        renderer = HFRenderer(folder)
        assert renderer.render_text(_request(0, messages, None)) == expected
    assert not any(tmp_path.glob("**/*.json"))


@needs_semantics
def test_a_template_that_renders_differently_stays_on_transformers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the probes render differently with every variant (here: prefixplan's renderer made
    to name every message), the folder keeps rendering through transformers."""
    from prefixplan.render.hf import HFRenderer

    folder = _copy(_folder("llama3"), tmp_path)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = (
        "{% for m in messages %}{{ m['role'] }}{% if 'name' in m %}(named){% endif %}: {{ m['content'] }}\n{% endfor %}"
    )
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    monkeypatch.setattr(hf_template, "template_message", lambda message, semantics: {**message, "name": "X"})
    first = HFRenderer(folder)
    assert first.template is None
    snap = hf_snapshot.read(folder)
    assert snap is not None and snap.semantics is None
    again = HFRenderer(folder)
    assert again.template is None and again._tokenizer is not None
    req = _request(0, [{"role": "user", "content": "hi"}], None)
    assert again.render_text(req) == "user: hi\n"  # transformers' text, not the named one


class _Rendering:
    """Stands in for a transformers version that handles messages as ``semantics`` says."""

    def __init__(self, template: str, semantics: hf_template.Semantics) -> None:
        self.template = hf_template.ChatTemplate(template, {}, semantics)

    def apply_chat_template(self, messages: Any, tools: Any = None, **_: Any) -> str:
        return self.template.render(messages, tools)


@needs_semantics
@pytest.mark.parametrize("semantics", hf_template.variants(), ids=str)
def test_the_variant_that_agrees_is_the_one_kept(semantics: hf_template.Semantics) -> None:
    """A template that shows null keys and reasoning: of the variants, the one the (stand-in)
    transformers version renders like is chosen."""
    template = (
        "{% for m in messages %}{{ m['role'] }}"
        "{% if 'name' in m %}[name]{% endif %}{% if m.reasoning_content %}<{{ m.reasoning_content }}>{% endif %}"
        ": {{ m['content'] }}\n{% endfor %}"
    )
    found = hf_snapshot.agreeing(_Rendering(template, semantics), template, {})
    assert found is not None
    assert (found.drop_none, found.alias_reasoning) == (semantics.drop_none, semantics.alias_reasoning)


@needs_semantics
def test_a_request_with_other_than_json_values_renders_through_transformers() -> None:
    class Text(str):
        pass

    folder = _folder("llama3")
    renderer = _from_snapshot(folder)
    messages = [{"role": "user", "content": Text("hello")}]
    assert not hf_template.plain(messages)
    text = renderer.render_text(_request(0, messages, None))
    assert renderer._tokenizer is not None
    expected = _reference(folder).apply_chat_template(
        [{"role": "user", "content": "hello"}], add_generation_prompt=True, tokenize=False
    )
    assert text == expected


@needs_semantics
def test_named_templates_pick_tool_use_when_tools_are_given() -> None:
    template = hf_template.ChatTemplate(
        {"default": "D{{ messages[0]['content'] }}", "tool_use": "T{{ tools | length }}"}, {}
    )
    messages = [{"role": "user", "content": "x"}]
    assert template.render(messages, None) == "Dx"
    assert template.render(messages, [{"type": "function"}]) == "T1"
    with pytest.raises(ValueError, match="empty conversation"):
        template.render([], None)


def test_plain_accepts_json_values_only() -> None:
    assert hf_template.plain({"a": [1, 2.5, True, None, "x", ("t",)], "b": {"c": {}}})
    assert not hf_template.plain({"a": {1, 2}})
    assert not hf_template.plain([b"bytes"])


@needs_semantics
def test_unsafe_attributes_are_refused_as_transformers_refuses_them() -> None:
    """prefixplan's template environment refuses what transformers' does, with the same error,
    and allows the same (the unsafe templates of tests/test_render_sandbox.py)."""
    import re

    from test_render_sandbox import UNSAFE
    from transformers.utils import chat_template_utils

    def outcome(render: Any) -> Any:
        try:
            return re.sub(r" at 0x[0-9a-f]+", "", render())
        except Exception as exc:
            return type(exc).__name__, re.sub(r" at 0x[0-9a-f]+", "", str(exc))

    for source in UNSAFE:
        ours = hf_template.ChatTemplate(source, {})

        def theirs(source: str = source) -> str:
            compiled = chat_template_utils._compile_jinja_template(source)
            return str(compiled.render(messages=[{"role": "user", "content": "hi {0}", "items": "shadowed"}]))

        def mine(template: Any = ours) -> str:
            return str(
                template.compiled(False).render(messages=[{"role": "user", "content": "hi {0}", "items": "shadowed"}])
            )

        assert outcome(mine) == outcome(theirs), source
