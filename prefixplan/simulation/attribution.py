"""The hit-loss waterfall as data: its runs, its steps and their JSON
(:mod:`prefixplan.simulation.waterfall` computes them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STEP_LABELS = {
    "unique": "not shared: no earlier request has the prefix",
    "breakers": "lost to cache breakers and unstable serialization (what fixes would return; estimate)",
    "block": "lost to block granularity (prefixes or tails shorter than a block)",
    "capacity": "lost to capacity",
    "ttl": "lost to TTL / idle eviction",
    "replicas": "lost to spreading over replicas",
}
"""What each step of the waterfall stands for."""


@dataclass(frozen=True, slots=True)
class Run:
    """One of the runs the steps are differences of: its name, the ``simulate`` options that make
    it, and its hit tokens (None when it could not be computed)."""

    name: str
    options: str
    hit_tokens: int | None


@dataclass(frozen=True, slots=True)
class Step:
    """One bar: its tokens, and the two runs it is the difference of (``minuend - subtrahend``)."""

    name: str
    tokens: int | None
    minuend: str
    subtrahend: str
    asked: bool = True  # False: the option was not given (the two runs are the same)


@dataclass(frozen=True, slots=True)
class Waterfall:
    """The hit-loss attribution of one simulation (module docstring)."""

    prompt_tokens: int
    runs: tuple[Run, ...]
    steps: tuple[Step, ...]
    predicted_tokens: int
    achieved_tokens: int | None = None
    achieved_requests: int | None = 0  # None: the count is not known (an analysis record's sum)
    achieved_source: str | None = None  # the log's cached_tokens, or the engines' counters
    requests: int = 0
    notes: tuple[str, ...] = ()
    token_bound: tuple[int, int] | None = None  # (low, high) token-level hits when not computed exactly

    def run(self, name: str) -> Run:
        return next(r for r in self.runs if r.name == name)

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    @property
    def unexplained_tokens(self) -> int | None:
        """Predicted minus achieved (None without the engine's counts)."""
        return None if self.achieved_tokens is None else self.predicted_tokens - self.achieved_tokens

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "runs": [{"name": r.name, "options": r.options, "hit_tokens": r.hit_tokens} for r in self.runs],
            "steps": [
                {
                    "name": s.name,
                    "label": STEP_LABELS[s.name],
                    "tokens": s.tokens,
                    "difference_of": [s.minuend, s.subtrahend],
                    "asked": s.asked,
                }
                for s in self.steps
            ],
            "predicted_tokens": self.predicted_tokens,
            "achieved_tokens": self.achieved_tokens,
            "achieved_requests": self.achieved_requests,
            "achieved_source": self.achieved_source,
            "requests": self.requests,
            "unexplained_tokens": self.unexplained_tokens,
            "token_level_bound": None
            if self.token_bound is None
            else {"low": self.token_bound[0], "high": self.token_bound[1]},
            "notes": list(self.notes),
        }
