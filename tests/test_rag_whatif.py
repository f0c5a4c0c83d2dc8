"""The documents-first what-if renders without segment spans (prefixplan/analysis/rag.py): the
same ids, so the same what-if, as rendering with them; and it still predicts the reordered log."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import pytest

from prefixplan.api import analyze
from prefixplan.logs import LineErrors, ReadOptions, iter_requests
from prefixplan.render import RenderSet

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"
DOCS_FIRST = ROOT / "examples" / "agent_log.docs-first.jsonl.gz"


def test_without_spans_same_ids_no_spans(qwen3_path: Path):
    requests = list(islice(iter_requests([str(EXAMPLE)], ReadOptions(), LineErrors()), 40))
    renderers = RenderSet(default_spec=f"hf:{qwen3_path}")
    with_spans = renderers.render_batch(requests)
    with renderers.without_spans():
        without = renderers.render_batch(requests)
    again = renderers.render_batch(requests)  # the flag is back
    for a, b, c in zip(with_spans, without, again, strict=True):
        assert not isinstance(a, Exception) and not isinstance(b, Exception) and not isinstance(c, Exception)
        assert a.tokens.tolist() == b.tokens.tolist()
        assert a.segments and a.chunks is not None and c.segments == a.segments
        assert b.segments == () and b.chunks == ()


def test_whatif_without_spans_equals_with_them(qwen3_path: Path, monkeypatch: pytest.MonkeyPatch):
    spec = f"hf:{qwen3_path}"
    fast = analyze([str(EXAMPLE)], tokenizer=spec, workers=1).to_json()["rag"]["whatif"]

    @contextlib.contextmanager
    def keep_spans(self: RenderSet) -> Iterator[None]:
        yield

    monkeypatch.setattr(RenderSet, "without_spans", keep_spans)
    full = analyze([str(EXAMPLE)], tokenizer=spec, workers=1).to_json()["rag"]["whatif"]
    assert fast == full
    assert fast["requests_rewritten"] > 0 and fast["gain_tokens"] > 0
    actual = analyze([str(DOCS_FIRST)], tokenizer=spec, workers=1, rag_whatif=False).to_json()["summary"]
    assert actual["reusable_tokens"] == fast["reusable_tokens"]


def test_documents_first_remembers_rewrites_within_bounds_and_copies_start_empty(monkeypatch: pytest.MonkeyPatch):
    """The what-if's rewrite of a message text is worked out once while it is remembered, gives
    what reorder_request gives, keeps at most REWRITES_KEPT texts, and a pickled copy (a worker's)
    carries none of them."""
    import pickle

    import prefixplan.analysis.rag as rag
    from prefixplan.core.hashes import segment_hash
    from prefixplan.core.types import Request

    doc = ("A recurring document paragraph that is long enough to count as a chunk. " * 4).strip()
    other = ("Another document paragraph, shared by several requests in this little log. " * 4).strip()
    counts = {segment_hash(doc): 3, segment_hash(other): 5}

    def request(line: int, text: str) -> Request:
        return Request("log", line, f"r{line}", "openai", messages=({"role": "user", "content": text},))

    texts = [f"Question {i}?\n\n{doc}\n\n{other}" if i % 3 else f"Question {i} without documents." for i in range(12)]
    calls: list[str] = []
    real = rag.reorder_content

    def counted(content: str, *args: object, **kwargs: object) -> str | None:
        calls.append(content)
        return real(content, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rag, "reorder_content", counted)
    monkeypatch.setattr(rag, "REWRITES_KEPT", 5)
    transform = rag.DocumentsFirst(counts)
    for rounds in range(2):
        for i, text in enumerate(texts[:4]):
            got = transform(request(i, text))
            calls_before = len(calls)
            expected = rag.reorder_request(request(i, text), counts)
            del calls[calls_before:]
            assert got == (expected if expected is not None else request(i, text))
    assert len(calls) == 4  # the second round found every rewrite remembered
    assert transform.moved == 4  # two of the four texts hold documents, twice each
    assert transform(request(1, texts[1])).messages[0]["content"].startswith(other)  # most requests first
    for i, text in enumerate(texts):
        transform(request(i, text))
    assert len(transform._rewritten) == 5
    copy = pickle.loads(pickle.dumps(transform))
    assert copy._rewritten == {} and copy._rewritten_chars == 0
    assert copy.counts == transform.counts and copy.moved == transform.moved
    kept = transform._rewritten
    assert transform._rewritten_chars == sum(len(k) + len(v or "") for k, v in kept.items())
    monkeypatch.setattr(rag, "REWRITE_CHARS_KEPT", 2 * len(texts[1]) + 2)  # one text and its rewrite
    for i, text in enumerate(texts):
        transform(request(i, text))
    assert 0 < transform._rewritten_chars <= rag.REWRITE_CHARS_KEPT
    assert transform._rewritten_chars == sum(len(k) + len(v or "") for k, v in kept.items())
    long = "Question?\n\n" + doc + "\n\n" + "x" * rag.REWRITE_CHARS_KEPT
    assert transform(request(99, long)) == rag.reorder_request(request(99, long), counts)
    assert long not in kept  # longer than the whole budget: worked out, not remembered
