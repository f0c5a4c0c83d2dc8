"""Format-neutral views of an analysis record, shared by the HTML and Markdown reports.

Both reports read the same record (docs/analysis-record.md); this module picks and
normalises the parts they show, so the two cannot disagree. The optional
``record["simulation"]`` section is read tolerantly (see docs/report.md for its shape):
parts that are absent are simply not shown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

KIND_ORDER = ("system", "tools", "rag", "history", "user", "template")
KIND_LABELS = {
    "system": "system",
    "tools": "tools",
    "rag": "RAG documents",
    "history": "history",
    "user": "user (unique)",
    "template": "template",
}
POLICY_ORDER = ("infinite", "lru", "lfu", "fifo", "priority", "pinned", "auto-promote")


def n(x: float | int | None) -> str:
    """``1,234`` for counts, ``1,234.57`` for non-integral floats, ``-`` for None."""
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "∞" if x > 0 else "-"
    if isinstance(x, float) and not x.is_integer():
        return f"{x:,.2f}"
    return f"{int(x):,}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def si(x: float) -> str:
    """Short engineering notation for axis ticks: 1k, 2.5M, 10G."""
    if x == 0:
        return "0"
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            v = x / div
            return (f"{v:.0f}" if v >= 10 or v.is_integer() else f"{v:.1f}") + suffix
    return f"{x:g}"


def human_bytes(b: float | None) -> str:
    if b is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(b) < 1024 or unit == "TiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024
    return f"{b:.1f} TiB"  # pragma: no cover


def ordered_kinds(kinds: Mapping[str, Mapping[str, int]]) -> list[tuple[str, int, int]]:
    """``(kind, tokens, reused)`` in the fixed order system, tools, rag, history, user, template, then others."""
    rest = sorted(k for k in kinds if k not in KIND_ORDER)
    return [(k, int(kinds[k].get("tokens", 0)), int(kinds[k].get("reused", 0))) for k in (*KIND_ORDER, *rest) if k in kinds]


def assumptions(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(what, value)`` rows naming the tokenizer, exactness, granularity and privacy rule."""
    s = record.get("summary") or {}
    tok = record.get("tokenizer") or {}
    g = record.get("granularity") or {}
    p = record.get("privacy") or {}
    gran = (f"{g['engine']} preset, " if g.get("engine") else "") + f"block {g.get('block_size', '?')} tokens"
    if g.get("rule"):
        gran += f" ({g['rule']})"
    exact = "exact engine tokens" if s.get("exact") else f"approximate: {s.get('approximate_reason') or 'approximate rendering'}"
    rows = [
        ("tokenizer", str(tok.get("label") or tok.get("spec") or "-")),
        ("token counts", exact),
        ("granularity", gran),
        ("privacy", privacy_sentence(record)),
    ]
    if p.get("show_user_text"):
        rows.append(("user text", "previews of user-authored text were allowed (--show-user-text)"))
    return rows


def privacy_sentence(record: Mapping[str, Any]) -> str:
    p = record.get("privacy") or {}
    m = p.get("min_tenants", "?")
    return (f"min_tenants = {m}: token ids and text are withheld for prefixes shared by fewer than {m} distinct users; "
            f"user-authored text is {'shown' if p.get('show_user_text') else 'never previewed'}")


def withheld_note(c: Mapping[str, Any], record: Mapping[str, Any]) -> str:
    m = (record.get("privacy") or {}).get("min_tenants", "?")
    return f"withheld: {c.get('tenants', '?')} user(s) < min_tenants {m}"


def safe_preview(c: Mapping[str, Any]) -> str | None:
    """The candidate's preview, or None when the candidate is withheld (whatever the record holds)."""
    if c.get("withheld"):
        return None
    p = c.get("preview")
    return str(p) if p else None


def users(c: Mapping[str, Any]) -> str:
    return n(c.get("tenants")) + ("+" if c.get("tenants_capped") else "")


def kv_bytes_per_token(record: Mapping[str, Any]) -> float | None:
    """KV bytes per token from the record (simulation section or top level), if known."""
    for src in (record.get("simulation") or {}, (record.get("simulation") or {}).get("savings") or {},
                record.get("model") or {}, record):
        v = src.get("kv_bytes_per_token") if isinstance(src, Mapping) else None
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    return None


def candidate_kv_bytes(c: Mapping[str, Any], per_token: float | None) -> float | None:
    for key in ("kv_bytes", "kv_memory_bytes"):
        v = c.get(key)
        if isinstance(v, (int, float)):
            return float(v)
    return per_token * c["length"] if per_token is not None and c.get("length") is not None else None


def breaker_where(b: Mapping[str, Any]) -> str:
    if b.get("line"):
        return f"system line {b['line']}, col {b.get('column')}"
    if b.get("token_offset") is not None:
        return f"tools (~token {b['token_offset']})"
    return "-"


def sorted_breakers(breakers: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Costliest first; ties by kind and pattern (a stable order for PR comments)."""
    return sorted(breakers, key=lambda b: (-(b.get("cost_tokens") or 0), str(b.get("kind")), str(b.get("pattern"))))


SEVERITY_ORDER = {"error": 0, "warning": 1, "notice": 2}


def findings(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Check/lint findings carried by the record (``findings`` or ``check.findings``), stably ordered."""
    items: list[Mapping[str, Any]] = list(record.get("findings") or [])
    check = record.get("check")
    if isinstance(check, Mapping):
        items += list(check.get("findings") or [])
    return sorted(items, key=lambda f: (SEVERITY_ORDER.get(str(f.get("severity")), 3), str(f.get("file") or ""),
                                        f.get("line") or 0, str(f.get("code") or ""), str(f.get("message") or "")))


# --- the simulation section -------------------------------------------------------------


def _first(m: Mapping[str, Any] | None, *keys: str) -> Any:
    if not isinstance(m, Mapping):
        return None
    for k in keys:
        if k in m and m[k] is not None:
            return m[k]
    return None


def _rate(part: Any) -> float | None:
    if isinstance(part, (int, float)):
        return float(part)
    v = _first(part, "hit_rate_tokens", "hit_rate", "token_hit_rate")
    return float(v) if isinstance(v, (int, float)) else None


def generations(sim: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``{"in_batch": {...}, "persistent": {...}}`` with ``hit_rate`` (token share) and extras."""
    if not isinstance(sim, Mapping):
        return {}
    src = sim.get("generations") if isinstance(sim.get("generations"), Mapping) else sim
    out: dict[str, dict[str, Any]] = {}
    for name, keys in (("in_batch", ("in_batch", "in-batch", "batch")), ("persistent", ("persistent", "radix"))):
        part = _first(src, *keys)
        rate = _rate(part)
        if rate is None:
            continue
        view: dict[str, Any] = {"hit_rate": rate}
        if isinstance(part, Mapping):
            for k in ("hit_rate_requests", "hit_tokens", "prefill_tokens", "prefill_tokens_saved", "capacity_tokens", "policy"):
                if part.get(k) is not None:
                    view[k] = part[k]
        out[name] = view
    return out


def sweep(sim: Mapping[str, Any] | None) -> dict[str, list[tuple[float, float]]]:
    """Capacity sweep as ``{policy: [(capacity_tokens, hit_rate), ...]}`` sorted by capacity.

    Accepts ``{"capacities": [...], "policies": {p: [rates]}}`` (or ``hit_rates``/``curves``
    instead of ``policies``; items may be numbers or ``{"hit_rate_tokens": x}``), or a list of
    rows ``{"policy", "capacity_tokens", "hit_rate_tokens"}``. Infinite capacities are dropped.
    """
    if not isinstance(sim, Mapping):
        return {}
    raw = _first(sim, "sweep", "capacity_sweep", "curve")
    pts: dict[str, list[tuple[float, float]]] = {}

    def add(policy: Any, cap: Any, rate: Any) -> None:
        r = _rate(rate)
        if not isinstance(cap, (int, float)) or r is None or not math.isfinite(float(cap)):
            return
        pts.setdefault(str(policy), []).append((float(cap), r))

    if isinstance(raw, Mapping):
        caps = _first(raw, "capacities", "capacity_tokens", "capacities_tokens") or []
        curves = _first(raw, "policies", "hit_rates", "curves", "hit_rate") or {}
        if isinstance(curves, Mapping):
            for policy, rates in curves.items():
                if isinstance(rates, Sequence):
                    for cap, rate in zip(caps, rates):
                        add(policy, cap, rate)
        rows = _first(raw, "rows", "points")
        if isinstance(rows, Sequence):
            raw = rows
    if isinstance(raw, Sequence) and not isinstance(raw, (str, bytes)):
        for row in raw:
            if isinstance(row, Mapping):
                add(_first(row, "policy") or "lru", _first(row, "capacity_tokens", "capacity"), row)
    order = {p: i for i, p in enumerate(POLICY_ORDER)}
    return {p: sorted(v) for p, v in sorted(pts.items(), key=lambda kv: (order.get(kv[0], 99), kv[0]))}


def configured_capacity(sim: Mapping[str, Any] | None) -> float | None:
    if not isinstance(sim, Mapping):
        return None
    v = _first(sim, "configured_capacity_tokens", "capacity_tokens", "configured_capacity")
    if v is None:
        v = _first(sim.get("config") or sim.get("cache") or {}, "capacity_tokens", "capacity")
    return float(v) if isinstance(v, (int, float)) and math.isfinite(float(v)) else None


_SAVING_LABELS = (
    (("prefill_tokens_saved", "saved_prefill_tokens"), "prefill tokens saved", "tokens"),
    (("gpu_seconds_saved", "gpu_s_saved"), "GPU-seconds saved", "seconds"),
    (("ttft_p50_s", "ttft_p50"), "TTFT p50", "ttft"),
    (("ttft_p95_s", "ttft_p95"), "TTFT p95", "ttft"),
    (("money", "money_saved", "cost_saved"), "money saved", "money"),
)


def _secs(x: Any) -> str:
    if not isinstance(x, (int, float)):
        return str(x)
    return f"{x * 1000:,.0f} ms" if abs(x) < 1 else f"{x:,.2f} s"


def _money(x: Any) -> str:
    if isinstance(x, Mapping):
        amount = _first(x, "amount", "saved", "value", "usd")
        cur = x.get("currency") or "USD"
        text = f"{amount:,.2f} {cur}" if isinstance(amount, (int, float)) else str(amount)
        basis = _first(x, "basis", "per", "period")
        return text + (f" ({basis})" if basis else "")
    if isinstance(x, (int, float)):
        return f"{x:,.2f} USD"
    return str(x)


def _ttft(x: Any) -> str:
    if isinstance(x, Mapping):
        before = _first(x, "without", "cold", "no_cache", "baseline")
        after = _first(x, "with", "warm", "cached")
        if before is not None or after is not None:
            return f"{_secs(before)} → {_secs(after)}"
    return _secs(x)


def savings(sim: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(label, formatted value)`` rows for the savings the simulation estimated."""
    src = _first(sim, "savings") if isinstance(sim, Mapping) else None
    if not isinstance(src, Mapping):
        return []
    rows = []
    for keys, label, kind in _SAVING_LABELS:
        v = _first(src, *keys)
        if v is None:
            if kind == "ttft":
                ttft = src.get("ttft")
                v = _first(ttft, keys[0].split("_")[1], keys[0].replace("ttft_", "").replace("_s", ""))
            if v is None:
                continue
        fmt = {"tokens": n, "seconds": _secs, "ttft": _ttft, "money": _money}[kind]
        rows.append((label, fmt(v)))
    return rows


def savings_assumptions(sim: Mapping[str, Any] | None) -> list[str]:
    src = sim if isinstance(sim, Mapping) else {}
    a = _first(src.get("savings") if isinstance(src.get("savings"), Mapping) else {}, "assumptions")
    if a is None:
        a = src.get("assumptions")
    if isinstance(a, Mapping):
        return [f"{k}: {v}" for k, v in a.items()]
    if isinstance(a, Sequence) and not isinstance(a, str):
        return [str(x) for x in a]
    return [str(a)] if a else []


# --- the candidate nesting (icicle) -------------------------------------------------------


def icicle(record: Mapping[str, Any], max_depth: int = 4) -> list[dict[str, Any]]:
    """Rectangles of the candidate nesting: the top ``max_depth`` levels under "all requests".

    Width is the share of requests (hits) passing through a prefix; a nested candidate's
    requests are a subset of its parent's, so children sit inside their parent. Each item:
    ``rank`` (None for the root), ``depth``, ``x0``/``x1`` in [0, 1], ``hits``, ``tokens``.
    Candidates whose parent is not among the listed ones are drawn at the first level.
    """
    cands = [c for c in record.get("candidates") or [] if c.get("rank") is not None]
    by_rank = {c["rank"]: c for c in cands}
    kids: dict[Any, list[Mapping[str, Any]]] = {}
    for c in cands:
        parent = c.get("parent") if c.get("parent") in by_rank and c.get("parent") != c["rank"] else None
        kids.setdefault(parent, []).append(c)
    total = float(max((record.get("summary") or {}).get("requests") or 0, sum(c.get("hits", 0) for c in kids.get(None, [])), 1))
    out = [{"rank": None, "depth": 0, "x0": 0.0, "x1": 1.0, "hits": total, "tokens": None, "label": "all requests"}]

    def place(parent: Any, x0: float, width: float, value: float, depth: int, seen: frozenset) -> None:
        children = sorted(kids.get(parent, []), key=lambda c: (-c.get("hits", 0), c["rank"]))
        if depth > max_depth or not children:
            return
        used = sum(max(0, c.get("hits", 0)) for c in children)
        scale = width / max(value, used, 1e-12)
        x = x0
        for c in children:
            if c["rank"] in seen:
                continue
            w = max(0, c.get("hits", 0)) * scale
            out.append({"rank": c["rank"], "depth": depth, "x0": x, "x1": x + w, "hits": c.get("hits", 0),
                        "tokens": c.get("length"), "label": c.get("label")})
            place(c["rank"], x, w, max(1, c.get("hits", 0)), depth + 1, seen | {c["rank"]})
            x += w

    place(None, 0.0, 1.0, total, 1, frozenset())
    return out
