"""Prometheus text-format parsing for the engines' ``/metrics`` endpoints.

Only what prefixplan reads: counter and gauge samples with their labels. vLLM 0.32 exposes
counters with the ``_total`` suffix (``vllm:prefix_cache_hits_total``); older builds and the
docs name them without it, so lookups accept both spellings.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)"
    r"(?:\{(?P<labels>.*)\})?"
    r"\s+(?P<value>[^\s]+)(?:\s+-?\d+)?\s*$"
)
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True, slots=True)
class Sample:
    """One metric sample line."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        for k, v in self.labels:
            if k == key:
                return v
        return None


def _unescape(value: str) -> str:
    return value.replace(r"\\", "\x00").replace(r"\"", '"').replace(r"\n", "\n").replace("\x00", "\\")


def _parse_value(text: str) -> float | None:
    low = text.lower()
    if low in ("nan",):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    try:
        return float(text)
    except ValueError:
        return None


def parse_metrics(text: str) -> list[Sample]:
    """Parse Prometheus exposition text; comment and unparsable lines are skipped."""
    out: list[Sample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        value = _parse_value(m.group("value"))
        if value is None:
            continue
        labels: list[tuple[str, str]] = []
        body = m.group("labels") or ""
        pos = 0
        while pos < len(body):
            lm = _LABEL.match(body, pos)
            if not lm:
                break
            labels.append((lm.group(1), _unescape(lm.group(2))))
            pos = lm.end()
        out.append(Sample(m.group("name"), tuple(labels), value))
    return out


def _names(name: str) -> tuple[str, ...]:
    base = name[: -len("_total")] if name.endswith("_total") else name
    return (base + "_total", base)


def counter_sum(samples: list[Sample], name: str, **match: str) -> float | None:
    """Sum of a counter over all label sets (optionally only those matching ``match``).

    ``name`` may be given with or without ``_total``. Returns None when the metric is absent.
    """
    total = 0.0
    found = False
    wanted = _names(name)
    for s in samples:
        if s.name in wanted and all(s.label(k) == v for k, v in match.items()):
            total += s.value
            found = True
    return total if found else None


def first_label(samples: list[Sample], name: str, label: str) -> str | None:
    """Value of ``label`` on the first sample of ``name`` (e.g. ``cache_config_info``)."""
    for s in samples:
        if s.name == name:
            value = s.label(label)
            if value is not None:
                return value
    return None
