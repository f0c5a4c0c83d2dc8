"""Renderer backends other than hf: (tested in test_render_qwen3.py): the embedded Mistral
default, tiktoken (approximate), the --tokenizer-map routing, and vLLM token-string decoding."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from chat_cases import cases

from prefixplan.api import analyze
from prefixplan.core.types import Request
from prefixplan.errors import TokenizerError, UsageError
from prefixplan.render import load_renderer, parse_template_kwargs, parse_tokenizer_map
from prefixplan.render.vllm_remote import _byte_decoder, token_strs_to_bytes

ROOT = Path(__file__).resolve().parent.parent


def _req(i: int, case: dict) -> Request:
    return Request(
        source="cases",
        line_no=i + 1,
        id=str(i),
        format="openai-chat",
        messages=tuple(case["messages"]),
        tools=tuple(case["tools"]) if case["tools"] else None,
    )


def _tiles(prompt) -> bool:
    segs = prompt.segments
    return (
        segs[0].start == 0
        and segs[-1].end == len(prompt)
        and all(a.end == b.start for a, b in itertools.pairwise(segs))
    )


def test_mistral_default_equals_mistral_common():
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    renderer = load_renderer(None)
    assert renderer.spec == "mistral:nemo" and renderer.exact
    reference = MistralTokenizer.v3(is_tekken=True)
    checked = 0
    for i, case in enumerate(cases()):
        req = _req(i, case)
        try:
            prompt = renderer.render(req)
        except TokenizerError:
            continue  # mistral-common rejects some conversations (e.g. no user turn last); so would vLLM
        chat = ChatCompletionRequest(
            messages=[
                {k: v for k, v in m.items() if k in ("role", "content", "tool_calls", "tool_call_id")}
                for m in case["messages"]
            ],
            tools=case["tools"],
        )
        assert prompt.tokens.tolist() == reference.encode_chat_completion(chat).tokens
        assert _tiles(prompt)
        checked += 1
    assert checked >= 30


def test_mistral_spans_find_system_moved_to_last_turn():
    renderer = load_renderer("mistral:nemo")
    req = _req(
        0,
        {
            "messages": [
                {"role": "system", "content": "Be terse and exact."},
                {"role": "user", "content": "first question"},
                {"role": "assistant", "content": "first answer"},
                {"role": "user", "content": "second question"},
            ],
            "tools": None,
        },
    )
    prompt = renderer.render(req)
    kinds = [s.kind for s in prompt.segments if s.kind != "template"]
    assert kinds == ["user", "assistant", "system", "user"]  # v3 puts the system text in the last turn


@pytest.mark.parametrize("incremental", [False, True], ids=["whole", "incremental"])
@pytest.mark.parametrize("name", ["v3", "v7"])
def test_mistral_sentencepiece_renders_chat(name: str, incremental: bool):
    """The SentencePiece tokenizers (no ``id_to_byte_piece`` in mistral-common): ids equal
    mistral-common's, segments tile the prompt and the message contents are found."""
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    from prefixplan.render.mistral import MistralRenderer

    renderer = MistralRenderer(name, incremental=incremental)
    reference = getattr(MistralTokenizer, name)()
    messages = [
        {"role": "system", "content": "Be terse.\nCite sources."},
        {"role": "user", "content": "Où est la gare ? 日本語 <0x0A> 𝔘😀"},
        {"role": "assistant", "content": "Tout droit, puis à gauche."},
        {"role": "user", "content": "Merci !\n\nEt le musée ?"},
    ]
    prompt = renderer.render(_req(0, {"messages": messages, "tools": None}))
    expected = reference.encode_chat_completion(ChatCompletionRequest(messages=messages)).tokens
    assert prompt.tokens.tolist() == expected
    assert _tiles(prompt)
    kinds = [s.kind for s in prompt.segments if s.kind != "template"]
    assert kinds.count("user") == 2 and "system" in kinds and "assistant" in kinds
    text, starts = renderer.decode_with_starts(prompt.tokens.tolist())
    assert "Où est la gare ? 日本語 <0x0A> 𝔘😀" in text and "Et le musée ?" in text
    assert starts.tolist() == sorted(starts.tolist()) and len(starts) == len(prompt.tokens)


def test_tiktoken_is_labelled_approximate():
    try:
        renderer = load_renderer("tiktoken:cl100k_base")
    except TokenizerError as exc:
        pytest.skip(f"tiktoken rank file not fetched: {exc}")
    assert not renderer.exact and "approximate" in renderer.label
    prompt = renderer.render(_req(0, cases()[0]))
    assert _tiles(prompt)
    assert {"system", "user", "template"} <= {s.kind for s in prompt.segments}
    # special-token strings in user text are ordinary text for this rendering
    special = renderer.render(_req(1, {"messages": [{"role": "user", "content": "<|endoftext|>"}], "tools": None}))
    assert 100257 not in special.tokens.tolist()


def test_tokenizer_map_routes_models(tmp_path, qwen3_path):
    rows = [
        {
            "model": m,
            "user": f"u{i}",
            "messages": [{"role": "system", "content": "You help. " * 30}, {"role": "user", "content": f"q{i}"}],
        }
        for i, m in enumerate(["a", "b", "a", "b"])
    ]
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    rec = analyze(str(log), tokenizer_map={"b": f"hf:{qwen3_path}"}, rag_whatif=False).to_json()
    specs = {t["spec"] for t in rec["tokenizers"]}
    assert specs == {"mistral:nemo", f"hf:{qwen3_path}"}
    assert rec["summary"]["namespaces"] == 2


def test_option_parsers():
    assert parse_template_kwargs('{"date_string": "26 Jul 2024"}') == {"date_string": "26 Jul 2024"}
    assert parse_template_kwargs("enable_thinking=false,x=3") == {"enable_thinking": False, "x": 3}
    assert parse_tokenizer_map(["m=hf:/x"]) == {"m": "hf:/x"}
    with pytest.raises(UsageError):
        parse_tokenizer_map(["nospec"])
    with pytest.raises(UsageError):
        parse_template_kwargs("[1]")
    with pytest.raises(UsageError):
        load_renderer("mistral:nemo", chat_template=str(ROOT / "README.md"))


def test_byte_level_token_strings_map_back_to_bytes():
    # GPT-2 byte-level pieces: "Ġ" is a space, "Ċ" a newline; multi-byte chars split over pieces
    text = "héllo 世界\n"
    data = text.encode()
    table = {b: ch for ch, b in _byte_decoder().items()}
    pieces = [
        "".join(table[b] for b in data[:3]),
        "".join(table[b] for b in data[3:8]),
        "".join(table[b] for b in data[8:]),
    ]
    assert b"".join(token_strs_to_bytes(pieces)) == data


def test_vllm_renderer_tokenizes_through_the_server_and_hides_secrets(monkeypatch, capsys):
    """vllm:URL renders through /tokenize (a fake server with vLLM's response shapes); the key
    comes from the environment and neither it nor URL credentials reach specs or errors."""
    from fake_engine import FakeEngine, char_tokenize, chat_text

    from prefixplan.errors import EndpointError
    from prefixplan.render.vllm_remote import VLLMRenderer

    secret = "sk-test-not-a-real-key-123"
    monkeypatch.setenv("MY_KEY", secret)
    with FakeEngine("vllm") as fake:
        renderer = VLLMRenderer(fake.url.replace("http://", "http://user:pass@"))
        assert "pass" not in renderer.spec and "pass" not in renderer.label
    with FakeEngine("vllm", api_key=secret) as fake:
        renderer = VLLMRenderer(fake.url, api_key_env="MY_KEY")
        assert secret not in renderer.label
        req = _req(0, cases()[0])
        prompt = renderer.render(req)
        assert prompt.tokens.tolist() == char_tokenize(chat_text(list(req.messages), list(req.tools or []) or None))
        assert {"system", "user"} <= {s.kind for s in prompt.segments}
    monkeypatch.setenv("MY_KEY", "")
    with pytest.raises(TokenizerError, match="MY_KEY"):
        VLLMRenderer("http://127.0.0.1:9", api_key_env="MY_KEY")
    monkeypatch.setenv("MY_KEY", secret)
    with FakeEngine("vllm", api_key=secret, fault="echo_auth_500") as fake:
        renderer = VLLMRenderer(fake.url, api_key_env="MY_KEY")
        with pytest.raises((EndpointError, TokenizerError)) as info:
            renderer.render(_req(0, cases()[0]))
        assert secret not in str(info.value)


def test_a_pre_tokenizer_marking_only_the_text_start_renders_whole_and_exact(tmp_path):
    """Metaspace with prepend_scheme "first" (SentencePiece tokenizers converted with
    legacy=False) adds "▁" only at offset 0: text after a special token, encoded alone, would
    gain one. The renderer's probe sees it and encodes such prompts whole."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from prefixplan.core.types import Request
    from prefixplan.render import load_renderer

    chars = sorted(set("abcdefghijklmnopqrstuvwxyz<>|/\n ") | {"▁"})
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<s>", "</s>")])
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = (
        "{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + eos_token + '\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
    )
    fast.save_pretrained(tmp_path / "sp")
    renderer = load_renderer(f"hf:{tmp_path / 'sp'}")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    request = Request(source="t", line_no=1, id="1", format="openai-chat", messages=tuple(messages))
    got = renderer.render(request).tokens.tolist()
    text = fast.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert got == fast.encode(text, add_special_tokens=False)  # what the engine computes


def test_tool_spans_are_found_after_each_other_and_anywhere_else():
    """Tools are looked for right after the previous one first, then anywhere free: a tool
    listed twice gets two spans, a tool behind a long header is still found, and a tool call's
    arguments are found in the engine's JSON or as logged."""
    import json

    from prefixplan.render.spans import TOOL_GAP_CHARS, locate

    a = {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}
    b = {"type": "function", "function": {"name": "b", "description": "bee"}}
    ja, jb = json.dumps(a, ensure_ascii=False), json.dumps(b, ensure_ascii=False)
    header = "#" * (TOOL_GAP_CHARS + 50)
    user = {"role": "user", "content": "question"}
    call = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "a", "arguments": '{"x":1}'}}]}
    text = f"<s>{ja}\n{jb}\n{header}{ja}</s><u>question</u><a>{json.dumps({'x': 1})}</a>"
    spans = locate(text, [user, call], [a, b, a])
    tools = [(s.index, s.start) for s in spans if s.kind == "tool"]
    assert tools == [(0, 3), (1, 4 + len(ja)), (2, 5 + len(ja) + len(jb) + len(header))]
    (args,) = [s for s in spans if s.kind == "assistant"]
    assert text[args.start : args.end] == '{"x": 1}'
    logged = text.replace('{"x": 1}', '{"x":1}')  # a template that writes the string as logged
    (args,) = [s for s in locate(logged, [user, call], [a, b, a]) if s.kind == "assistant"]
    assert logged[args.start : args.end] == '{"x":1}'


def test_a_preloaded_renderer_is_the_one_used_and_counts_nothing(qwen3_path):
    from prefixplan.render import RenderSet

    renderers = RenderSet(default_spec=f"hf:{qwen3_path}")
    renderers.preload("m")
    renderers.preload("m")  # a second call starts nothing more
    assert renderers.models_by_spec == {}  # loading is not rendering
    r = renderers.for_model("m")
    assert r.spec == f"hf:{qwen3_path}"
    assert renderers.for_model("other") is r  # same spec: loaded once
    assert renderers.models_by_spec == {f"hf:{qwen3_path}": {"m", "other"}}


def test_a_preload_that_fails_raises_where_the_renderer_is_asked_for(tmp_path):
    from prefixplan.render import RenderSet

    renderers = RenderSet(default_spec=f"hf:{tmp_path / 'missing'}")
    renderers.preload(None)  # the background load fails quietly
    with pytest.raises((TokenizerError, UsageError)):
        renderers.for_model(None)
