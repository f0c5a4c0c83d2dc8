"""``renderer.encode_stats()``: requests encoded incrementally vs in full; and mixed logs pay
only for the requests that need rendering (those that carry token ids are never encoded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from prefixplan.core.types import Request
from prefixplan.render import RenderSet
from prefixplan.render.mistral import MistralRenderer

SYSTEM = "You are a support assistant.\nAnswer briefly.\n\n" + "Policy line.\n" * 40


def _chat(k: int, question: str, *, fmt: str = "openai-chat", ids: tuple[int, ...] | None = None) -> Request:
    messages: Any = ({"role": "system", "content": SYSTEM}, {"role": "user", "content": question})
    return Request(source="t", line_no=k, id=str(k), format=fmt, messages=messages, prompt_ids=ids)


def test_encode_stats_counts_requests_that_reused_ids() -> None:
    renderer = MistralRenderer("nemo", incremental=True)
    assert renderer.encode_stats() == {"incremental": 0, "full": 0}
    renderer.render(_chat(1, "How do I reset my password?"))
    assert renderer.encode_stats() == {"incremental": 0, "full": 1}  # nothing to reuse yet
    renderer.render(_chat(2, "Why is my invoice late?"))
    renderer.render(_chat(3, "Where is the router manual?"))
    assert renderer.encode_stats() == {"incremental": 2, "full": 1}  # the system prompt's ids reused
    renderer.render(Request(source="t", line_no=4, id="4", format="openai-completions", prompt="plain text"))
    renderer.render(Request(source="t", line_no=5, id="5", format="openai-completions", prompt_ids=(1, 2, 3)))
    assert renderer.encode_stats() == {"incremental": 2, "full": 2}  # a text prompt is encoded; ids are not


def test_the_old_path_stays_available_and_gives_the_same_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    requests = [_chat(k, f"Question {k}?\n/path {k}") for k in range(4)]
    new = MistralRenderer("nemo")
    monkeypatch.setenv("PREFIXPLAN_INCREMENTAL", "0")
    old = MistralRenderer("nemo")
    assert old._encoder is None and new._encoder is not None
    for req in requests:
        a, b = new.render(req), old.render(req)
        assert a.tokens.tolist() == b.tokens.tolist()
        assert a.segments == b.segments and a.chunks == b.chunks
    assert old.encode_stats() == {"incremental": 0, "full": 4}
    assert new.encode_stats()["incremental"] == 3


def test_mixed_logs_render_only_the_requests_without_ids() -> None:
    """Engine-log requests carry the ids the engine prefilled; they reach no renderer (none is
    even loaded for a batch made only of them), completions with token prompts are taken as
    they are, and only the chat requests are encoded."""
    engine = [_chat(10 + k, f"logged {k}", fmt="vllm-log", ids=(1, 2, 3, 4 + k)) for k in range(5)]
    ids_only = RenderSet()
    prompts = ids_only.render_batch(engine)
    assert ids_only.loaded == [] and ids_only.engine_ids == {"used": 5}
    assert [p.tokens.tolist() for p in prompts] == [[1, 2, 3, 4 + k] for k in range(5)]  # type: ignore[union-attr]

    chat = [_chat(k, f"Question {k}?") for k in range(3)]
    token_prompt = Request(source="t", line_no=20, id="20", format="openai-completions", prompt_ids=(5, 6, 7))
    mixed = RenderSet()
    seen: list[Request] = []
    batch = [chat[0], *engine[:2], chat[1], token_prompt, *engine[2:], chat[2]]
    renderer = mixed.for_model(None)
    render_many = renderer.render_many

    def spy(requests: Any) -> Any:
        seen.extend(requests)
        return render_many(requests)

    renderer.render_many = spy  # type: ignore[method-assign]
    out = mixed.render_batch(batch)
    assert all(not isinstance(p, Exception) for p in out)
    assert {r.line_no for r in seen} == {0, 1, 2, 20}  # no engine-log request reached the renderer
    stats = renderer.encode_stats()  # type: ignore[attr-defined]
    assert stats["incremental"] + stats["full"] == 3  # only the chat requests were encoded
    assert mixed.encode_stats() == stats


def test_spans_and_chunks_equal_the_old_path_on_the_example_log() -> None:
    """The incremental path builds the prompt text from the texts it encoded (checked against
    the ids run by run): segments and document chunks are those of decoding the ids."""
    from prefixplan.logs import LineErrors, ReadOptions, iter_requests

    log = Path(__file__).resolve().parent.parent / "examples" / "agent_log.jsonl.gz"
    requests = list(iter_requests([str(log)], ReadOptions(), LineErrors()))[:150]
    new, old = MistralRenderer("nemo", incremental=True), MistralRenderer("nemo", incremental=False)
    for a, b in zip(new.render_many(requests), old.render_many(requests), strict=True):
        assert a.tokens.tolist() == b.tokens.tolist()
        assert (a.segments, a.chunks) == (b.segments, b.chunks), a.request.line_no
    assert new.encode_stats()["incremental"] > 100


def test_an_incremental_renderer_survives_pickling() -> None:
    import pickle

    renderer = MistralRenderer("nemo", incremental=True)
    request = _chat(1, "How do I reset my password?")
    expected = renderer.render(request).tokens.tolist()
    assert pickle.loads(pickle.dumps(renderer)).render(request).tokens.tolist() == expected
