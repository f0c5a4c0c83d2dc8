"""The documents-first what-if takes the requests it leaves as they are from the first pass
(prefixplan/analysis/earlier.py): the same what-if as rendering every request again, with one
worker or two, with render failures, lines holding several requests and a file that grew."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prefixplan.analysis import earlier as earlier_mod
from prefixplan.analysis.earlier import EarlierRows
from prefixplan.analysis.first_pass import FirstPass
from prefixplan.analysis.rowstore import RowStore
from prefixplan.api import analyze
from prefixplan.core.granularity import engine_granularity
from prefixplan.logs import LineErrors, ReadOptions, iter_requests
from prefixplan.render import RenderSet
from prefixplan.render.stream import RenderFailure
from prefixplan.trace.blocks import TraceBuilder
from prefixplan.trace.columns import RowColumns
from prefixplan.trace.inprocess import Unrendered, render_in_process
from prefixplan.trace.rows import REFERENCE_UNITS, RowMaker
from prefixplan.trace.storage.spill import RaggedU64
from tests.shard_logs import EXAMPLE, clean, split_example

_PROMPT = " ".join(f"step {i}: read the ticket, then answer it." for i in range(40))
BATCHED = {"model": "m", "prompt": [_PROMPT, _PROMPT]}  # the second reuses the first's blocks


def _log(folder: Path) -> Path:
    """The example cut into files (gzip ones, malformed lines, requests the tokenizer rejects),
    one line of which holds two requests (a completion with a list of prompts)."""
    files = split_example(folder)
    plain = next(p for p in files if p.suffix == ".jsonl" and p.stat().st_size > 10_000)
    lines = plain.read_text().splitlines()
    lines.insert(2, json.dumps(BATCHED))
    plain.write_text("\n".join(lines) + "\n")
    return folder


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[EarlierRows]:
    seen: list[EarlierRows] = []
    fill = EarlierRows.fill

    def spy(self: EarlierRows, cols: RowColumns) -> RowColumns:
        if not seen or seen[-1] is not self:
            seen.append(self)
        return fill(self, cols)

    monkeypatch.setattr(EarlierRows, "fill", spy)
    return seen


@pytest.mark.parametrize("workers", [1, 2])
def test_the_whatif_is_the_same_whether_unchanged_requests_render_again_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    folder = _log(tmp_path / "log")
    seen = _spy(monkeypatch)
    taken = clean(analyze([str(folder)], workers=workers).to_json())
    assert len(seen) == 1
    earlier = seen[0]
    whatif = taken["rag"]["whatif"]
    assert whatif["requests_rewritten"] > 0 and whatif["gain_tokens"] > 0
    assert earlier.usable and earlier.filled > 0 and earlier.unmatched == 0
    # rendered again: the batched line (two rows, one place) and each rejected request
    rejected = {(s["source"], s["line"]) for s in taken["errors"]["samples"] if s["reason"].startswith("render")}
    assert rejected and rejected <= earlier.render_again
    assert any(line == 3 for _, line in earlier.render_again)  # the line holding two requests
    monkeypatch.setattr(FirstPass, "earlier_rows", lambda self, failures: None)
    again = clean(analyze([str(folder)], workers=workers).to_json())
    assert taken == again


def _rows(requests: list[Any], block_size: int = 16) -> RowColumns:
    renderers, maker = RenderSet(), RowMaker(block_size)
    rows = [r.row for r in render_in_process(iter(requests), renderers, maker, 8, lambda req, why: None)]
    return RowColumns.of_rows(rows)


def _first_pass(first: RowColumns) -> tuple[RowStore, RaggedU64]:
    """The row store and the kept block keys of a first pass over ``first``."""
    store, keys = RowStore(), RaggedU64()
    builder = TraceBuilder(engine_granularity("vllm", 16), keys=keys)
    store.add_columns(first)
    builder.add_columns(first)
    builder.finish()
    return store, keys


def test_fill_puts_the_first_pass_keys_in_place_and_counts_a_line_it_never_saw() -> None:
    requests = list(islice(iter_requests([str(EXAMPLE)], ReadOptions(), LineErrors()), 12))
    first = _rows(requests)
    store, keys = _first_pass(first)
    earlier = EarlierRows(store, keys, 16, [])
    assert earlier.usable and not earlier.render_again
    grown = [*requests[:3], replace(requests[3], line_no=10**6)]
    mixed: list[Any] = [requests[0], Unrendered(requests[1]), Unrendered(requests[2]), Unrendered(grown[3])]
    cols = _rows(mixed)
    assert cols.units.tolist()[1:] == [REFERENCE_UNITS] * 3 and cols.index.tolist() == [0, 1, 2, 3]
    filled = earlier.fill(cols)
    assert earlier.filled == 2 and earlier.unmatched == 1
    for i in range(3):
        assert filled.prompt_tokens[i] == first.prompt_tokens[i]
        assert filled.units[i] == first.units[i]
        assert filled.block_keys.row(i).tolist() == first.block_keys.row(i).tolist()
    assert filled.prompt_tokens[3] == 0 and filled.units[3] == 0 and filled.block_keys.row(3).shape[0] == 0
    keys.close()


def test_places_two_rows_share_and_failures_are_rendered_again() -> None:
    requests = list(islice(iter_requests([str(EXAMPLE)], ReadOptions(), LineErrors()), 4))
    twin = replace(requests[2], line_no=requests[1].line_no)
    first = _rows([requests[0], requests[1], twin, requests[3]])
    store, keys = _first_pass(first)
    failed = RenderFailure(requests[0].source, 99, "rejected")
    earlier = EarlierRows(store, keys, 16, [failed])
    assert earlier.render_again == {(requests[0].source, 99), (requests[1].source, requests[1].line_no)}
    found = earlier.rows_of([requests[0].source], np.zeros(4, dtype=np.int64), first.line)
    assert found.tolist() == [0, -1, -1, 3]  # the shared place names no row
    keys.close()


def test_too_many_places_to_render_again_turn_reuse_off(monkeypatch: pytest.MonkeyPatch) -> None:
    requests = list(islice(iter_requests([str(EXAMPLE)], ReadOptions(), LineErrors()), 2))
    first = _rows(requests)
    store, keys = _first_pass(first)
    failures = [RenderFailure("x.jsonl", n, "rejected") for n in (1, 2)]
    assert EarlierRows(store, keys, 16, failures).usable
    monkeypatch.setattr(earlier_mod, "MAX_RENDER_AGAIN", 1)
    assert not EarlierRows(store, keys, 16, failures).usable  # each job would carry them
    keys.close()


def test_a_gzip_log_gives_the_same_whatif_with_one_process_as_with_two(tmp_path: Path) -> None:
    """The documents-first what-if through the pieces of one compressed log (workers read them)."""
    log = tmp_path / "one.jsonl.gz"
    log.write_bytes(gzip.compress(gzip.decompress(EXAMPLE.read_bytes()), mtime=0))
    one = analyze([str(log)], workers=1).to_json()["rag"]["whatif"]
    two = analyze([str(log)], workers=2).to_json()["rag"]["whatif"]
    assert one == two and one["requests_rewritten"] > 0
