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
