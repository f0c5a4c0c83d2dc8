"""What the engines achieved, from their prefix-cache counters (``simulate --achieved-from-status``).

``prefixplan status --json FILE`` records each replica's cumulative counters (vLLM
``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries``, SGLang's equivalents; tokens). Taken
before and after the traffic a log covers, the difference summed over the replicas is what the
engines reused while serving it: the waterfall's achieved bar. One snapshot alone gives the
counters since each engine started.

The counters count every request the engines served, the log's or not: the queried tokens are
compared with the log's prompt tokens (:func:`coverage_note`), so a bar that covers more (or less)
traffic than the log says so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixplan.errors import UsageError


@dataclass(frozen=True, slots=True)
class EngineCounts:
    """Prefix-cache hits and queries (tokens) summed over ``replicas``, and where they came from."""

    hits: int
    queries: int | None
    replicas: int
    source: str


def parse_snapshots(value: str | Sequence[str]) -> tuple[str, ...]:
    """``AFTER`` or ``BEFORE,AFTER`` (or a sequence of one or two paths) as a tuple of paths."""
    paths = tuple(p.strip() for p in value.split(",")) if isinstance(value, str) else tuple(map(str, value))
    if len(paths) not in (1, 2) or not all(paths):
        raise UsageError(
            "--achieved-from-status takes one or two `prefixplan status --json` files",
            hint="status --json before.json, send the traffic, status --json after.json; then "
            "--achieved-from-status before.json,after.json",
        )
    return paths


def _replicas(path: str) -> dict[str, dict[str, Any]]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--achieved-from-status: cannot read {path}: {exc}") from None
    rows = doc.get("replicas") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows:
        raise UsageError(f"--achieved-from-status: {path} is not `prefixplan status --json` output with replicas")
    out = {}
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("hits"), (int, float)):
            where = row.get("endpoint") if isinstance(row, dict) else row
            raise UsageError(
                f"--achieved-from-status: {path} has no prefix-cache counters for {where}",
                hint="every replica must be reachable and expose its counters when status runs",
            )
        out[str(row.get("endpoint"))] = row
    return out


def engine_counts(value: str | Sequence[str]) -> EngineCounts:
    """The counters' difference between two snapshots (or since start for one), summed over the
    replicas; the replicas of both must be the same and their counters must not go down."""
    paths = parse_snapshots(value)
    after = _replicas(paths[-1])
    before = _replicas(paths[0]) if len(paths) == 2 else {}
    if before and set(before) != set(after):
        raise UsageError(
            f"--achieved-from-status: {paths[0]} and {paths[1]} list different replicas",
            hint="take both snapshots of the same endpoints",
        )
    hits, queries = 0.0, 0.0
    known_queries = True
    for endpoint, row in after.items():
        start = before.get(endpoint, {"hits": 0.0, "queries": 0.0})
        dh = float(row["hits"]) - float(start["hits"])
        if row.get("queries") is None or start.get("queries") is None:
            known_queries = False
            dq = 0.0
        else:
            dq = float(row["queries"]) - float(start["queries"])
        if dh < 0 or dq < 0:
            raise UsageError(
                f"--achieved-from-status: the counters of {endpoint} went down between the snapshots",
                hint="the engine restarted: take the snapshots again around the traffic",
            )
        hits, queries = hits + dh, queries + dq
    engines = sorted({str(r.get("engine") or "engine") for r in after.values()})
    span = f"between {paths[0]} and {paths[1]}" if before else f"since start ({paths[0]})"
    noun = "replica" if len(after) == 1 else "replicas"
    source = f"{'/'.join(engines)} prefix-cache counters of {len(after)} {noun}, {span}"
    return EngineCounts(round(hits), round(queries) if known_queries else None, len(after), source)


def coverage_note(counts: EngineCounts, prompt_tokens: int) -> str:
    """Whether the counters cover the log's traffic: their queried tokens against its prompt tokens."""
    if counts.queries is None:
        return "achieved: the engine counts no queried tokens, so whether its counters cover only the log is not known"
    if counts.queries == prompt_tokens:
        return f"achieved: the engine's counters queried {counts.queries:,} tokens, the log's prompt tokens exactly"
    more = counts.queries > prompt_tokens
    return (
        f"achieved: the engine's counters queried {counts.queries:,} tokens, the log's prompts hold "
        f"{prompt_tokens:,}: they cover {'more' if more else 'less'} traffic than the log"
        + (
            " (other clients, warm-ups, requests outside the log's window, or preempted requests counted twice)"
            if more
            else " (a replica not in the snapshots, or requests the engine did not serve)"
        )
    )
