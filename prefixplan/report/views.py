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


def money_tick(x: float) -> str:
    """A dollar amount for an axis tick: $0.12, $3.4, $1.2k."""
    if abs(x) >= 1000:
        return "$" + si(x)
    return f"${x:,.2f}" if abs(x) < 10 else f"${x:,.0f}"


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
    return [
        (k, int(kinds[k].get("tokens", 0)), int(kinds[k].get("reused", 0))) for k in (*KIND_ORDER, *rest) if k in kinds
    ]


def assumptions(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(what, value)`` rows naming the tokenizer, exactness, granularity and privacy rule."""
    s = record.get("summary") or {}
    tok = record.get("tokenizer") or {}
    g = record.get("granularity") or {}
    p = record.get("privacy") or {}
    gran = (f"{g['engine']} preset, " if g.get("engine") else "") + f"block {g.get('block_size', '?')} tokens"
    if g.get("rule"):
        gran += f" ({g['rule']})"
    exact = (
        "exact engine tokens"
        if s.get("exact")
        else f"approximate: {s.get('approximate_reason') or 'approximate rendering'}"
    )
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
    return (
        f"min_tenants = {m}: token ids and text are withheld for prefixes shared by fewer than {m} distinct users; "
        f"user-authored text is {'shown' if p.get('show_user_text') else 'never previewed'}"
    )


def withheld_note(c: Mapping[str, Any], record: Mapping[str, Any]) -> str:
    m = (record.get("privacy") or {}).get("min_tenants", "?")
    return f"withheld: {c.get('tenants', '?')} user(s) < min_tenants {m}"


def safe_preview(c: Mapping[str, Any]) -> str | None:
    """The candidate's preview with dynamic content (dates, ids) masked as ``<date-time>`` etc., or
    None when the candidate is withheld (whatever the record holds)."""
    if c.get("withheld"):
        return None
    p = c.get("preview")
    if not p:
        return None
    from prefixplan.analysis.breakers import mask_dynamic

    return mask_dynamic(str(p))


def split_withheld(
    cands: Sequence[Mapping[str, Any]], record: Mapping[str, Any]
) -> tuple[list[Mapping[str, Any]], dict[str, Any] | None]:
    """``(shown, group)``: the candidates listed one per row, and the withheld ones as one group
    (``count``, ``ranks``, ``reusable``, ``hits``, ``kinds``, ``text``) or None. The group
    carries counts only, never text."""
    shown = [c for c in cands if not c.get("withheld")]
    hidden = [c for c in cands if c.get("withheld")]
    if not hidden:
        return shown, None
    m = (record.get("privacy") or {}).get("min_tenants", "?")
    kinds: dict[str, int] = {}
    for c in hidden:
        kinds[str(c.get("label"))] = kinds.get(str(c.get("label")), 0) + 1
    reusable = sum(int(c.get("reusable_tokens") or 0) for c in hidden)
    who = "single-user" if m == 2 else f"fewer-than-{m}-user"
    what = ", ".join(f"{k} ×{n}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    text = (
        f"{len(hidden)} {who} prefix{'es' if len(hidden) != 1 else ''} withheld ({what}): "
        f"{n(reusable)} reusable tokens; no text shown (min_tenants = {m})"
    )
    return shown, {
        "count": len(hidden),
        "ranks": [c.get("rank") for c in hidden],
        "reusable": reusable,
        "hits": sum(int(c.get("hits") or 0) for c in hidden),
        "kinds": kinds,
        "text": text,
    }


def users(c: Mapping[str, Any]) -> str:
    return n(c.get("tenants")) + ("+" if c.get("tenants_capped") else "")


def kv_bytes_per_token(record: Mapping[str, Any]) -> float | None:
    """KV bytes per token from the record (simulation section or top level), if known."""
    for src in (
        record.get("simulation") or {},
        (record.get("simulation") or {}).get("savings") or {},
        record.get("model") or {},
        record,
    ):
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
    return sorted(
        items,
        key=lambda f: (
            SEVERITY_ORDER.get(str(f.get("severity")), 3),
            str(f.get("file") or ""),
            f.get("line") or 0,
            str(f.get("code") or ""),
            str(f.get("message") or ""),
        ),
    )


# --- the simulation section -------------------------------------------------------------
# ``record["simulation"]`` is :func:`prefixplan.simulation.to_json` output: ``runs`` (one per cache
# model, each with ``label``, ``policy``, ``capacity_tokens``, ``hit_tokens``,
# ``hit_rate_tokens`` ...), the labels ``in_batch`` / ``persistent`` / ``headline`` naming runs,
# ``curves`` ``{policy: [{capacity_tokens, hit_rate_tokens, hit_rate_requests}]}``, ``savings``,
# ``money``, ``self_hosted_usd_saved``, ``kv_bytes_per_token`` and ``notes``.


def _runs(sim: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(r.get("label")): r for r in sim.get("runs") or [] if isinstance(r, Mapping)}


def _num_or_none(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x)) else None


def generations(sim: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The runs the report names: ``in_batch`` (generation a), ``persistent`` (generation b,
    unbounded) and ``headline`` (the configured cache, when it is another run).

    Each: ``label``, ``hit_rate`` (share of prompt tokens), ``hit_rate_requests``,
    ``hit_tokens``, ``capacity_tokens``, ``policy``.
    """
    if not isinstance(sim, Mapping):
        return {}
    runs = _runs(sim)
    out: dict[str, dict[str, Any]] = {}
    for name in ("in_batch", "persistent", "headline"):
        run = runs.get(str(sim.get(name)))
        if run is None or _num_or_none(run.get("hit_rate_tokens")) is None:
            continue
        if name == "headline" and sim.get("headline") == sim.get("persistent"):
            continue
        out[name] = {
            "label": run.get("label"),
            "hit_rate": float(run["hit_rate_tokens"]),
            "hit_rate_requests": run.get("hit_rate_requests"),
            "hit_tokens": run.get("hit_tokens"),
            "capacity_tokens": _num_or_none(run.get("capacity_tokens")),
            "policy": run.get("policy"),
        }
    return out


def sweep(sim: Mapping[str, Any] | None) -> dict[str, list[tuple[float, float]]]:
    """The capacity curves: ``{policy: [(capacity_tokens, token hit rate), ...]}`` by capacity."""
    curves = sim.get("curves") if isinstance(sim, Mapping) else None
    if not isinstance(curves, Mapping):
        return {}
    out: dict[str, list[tuple[float, float]]] = {}
    for policy, pts in curves.items():
        rows = []
        for pt in pts or []:
            if isinstance(pt, Mapping):
                cap, rate = _num_or_none(pt.get("capacity_tokens")), _num_or_none(pt.get("hit_rate_tokens"))
            elif isinstance(pt, Sequence) and len(pt) >= 2:
                cap, rate = _num_or_none(pt[0]), _num_or_none(pt[1])
            else:
                continue
            if cap is not None and rate is not None:
                rows.append((cap, rate))
        if rows:
            out[str(policy)] = sorted(rows)
    order = {p: i for i, p in enumerate(POLICY_ORDER)}
    return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], 99), kv[0])))


def configured_capacity(sim: Mapping[str, Any] | None) -> float | None:
    """Capacity (tokens) of the headline run: the cache the savings refer to."""
    if not isinstance(sim, Mapping):
        return None
    run = _runs(sim).get(str(sim.get("headline")))
    return _num_or_none(run.get("capacity_tokens")) if run else None


def _secs(x: Any) -> str:
    if not isinstance(x, (int, float)):
        return "-"
    return f"{x * 1000:,.0f} ms" if abs(x) < 1 else f"{x:,.2f} s"


def profile_label(sav: Mapping[str, Any]) -> str:
    """The prefill profile of a ``savings`` section with where its figures come from: ``h100-8b
    (derived from <model>, <GPU>, efficiency E)``, ``NAME (measured ...)`` or an assumption."""
    name = str(sav.get("profile") or "")
    if sav.get("profile_is_assumption"):
        return f"{name} (an assumption, not measured)"
    provenance = sav.get("profile_provenance")
    return f"{name} ({provenance})" if provenance else name


def savings(sim: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(label, formatted value)`` rows for what the simulation estimated at the headline cache."""
    if not isinstance(sim, Mapping):
        return []
    rows: list[tuple[str, str]] = []
    head = _runs(sim).get(str(sim.get("headline")))
    if head is not None and head.get("hit_tokens") is not None:
        rows.append(("prefill tokens saved", f"{n(head['hit_tokens'])} of {n(head.get('prompt_tokens'))}"))
    sav = sim.get("savings")
    if isinstance(sav, Mapping):
        if sav.get("gpu_seconds_saved") is not None:
            rows.append(
                (
                    "GPU-seconds saved",
                    f"{_secs(sav['gpu_seconds_saved'])} "
                    f"({_secs(sav.get('gpu_seconds_without'))} → {_secs(sav.get('gpu_seconds_with'))})",
                )
            )
        for q in ("p50", "p95", "p99"):
            before, after = sav.get(f"ttft_{q}_without_s"), sav.get(f"ttft_{q}_with_s")
            if before is not None or after is not None:
                rows.append((f"TTFT {q}", f"{_secs(before)} → {_secs(after)}"))
    money = sim.get("money")
    if isinstance(money, Mapping) and money.get("usd_saved") is not None:
        who = " ".join(str(x) for x in (money.get("provider"), money.get("model")) if x)
        rows.append(("money saved", f"${money['usd_saved']:,.2f}" + (f" ({who} prices)" if who else "")))
    if _num_or_none(sim.get("self_hosted_usd_saved")) is not None:
        rows.append(("GPU time saved, self-hosted", f"${sim['self_hosted_usd_saved']:,.4g}"))
    return rows


def savings_assumptions(sim: Mapping[str, Any] | None) -> list[str]:
    """What the savings assume: granularity, prefill profile, queueing, and the simulation's notes."""
    if not isinstance(sim, Mapping):
        return []
    out = []
    if sim.get("granularity"):
        out.append(f"simulated granularity: {sim['granularity']}")
    sav = sim.get("savings")
    notes = [str(x) for x in sim.get("notes") or []]
    if isinstance(sav, Mapping) and sav.get("profile"):
        out.append(f"prefill profile {profile_label(sav)}")
        notes = [x for x in notes if not x.startswith(f"prefill profile {sav['profile']!r}")]
    if isinstance(sim.get("money"), Mapping) and sim["money"].get("prices_as_of"):
        out.append(f"prices as of {sim['money']['prices_as_of']}")
    return out + notes


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
    total = float(
        max((record.get("summary") or {}).get("requests") or 0, sum(c.get("hits", 0) for c in kids.get(None, [])), 1)
    )
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
            out.append(
                {
                    "rank": c["rank"],
                    "depth": depth,
                    "x0": x,
                    "x1": x + w,
                    "hits": c.get("hits", 0),
                    "tokens": c.get("length"),
                    "label": c.get("label"),
                }
            )
            place(c["rank"], x, w, max(1, c.get("hits", 0)), depth + 1, seen | {c["rank"]})
            x += w

    place(None, 0.0, 1.0, total, 1, frozenset())
    return out
