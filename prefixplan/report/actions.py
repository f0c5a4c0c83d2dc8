"""Next steps: a ranked list of what to do, each with its expected effect from the record's own models.

Every number here is read from, or computed with the same formula as, a figure of the analysis
record; nothing is estimated in prose:

* **move dynamic content / fix a breaker** (``breakers[]``): the breaker's ``cost_tokens``
  (``(variants - 1) x tail_tokens``), and its prefill time with the record's prefill profile
  (``(variants - 1) x (b x tail + c x tail x (token_offset + tail / 2)) x gpus``, the model of
  :mod:`prefixplan.savings.prefill`);
* **warm and pin the top prefixes** (``simulation.pinned``): the hit tokens of the pinned run
  against plain LRU at the same capacity, its GPU-seconds, and the pinned tokens' KV memory;
* **size the GPU prefix cache** (``simulation.curves`` and ``savings_curve``): the smallest swept
  capacity whose LRU hit rate reaches 90% / 95% of the unbounded cache's, in tokens and, with a
  KV size (:mod:`prefixplan.savings.kvsize`), in GB;
* **put documents first** (``rag.whatif``): the documents-first layout's ``gain_tokens``.

Where a step of the hit-loss waterfall (``simulation.waterfall``) measures the same loss, the
action cites it: the breakers step (the breakers' costs summed, capped at the unshared tokens)
and the capacity step (unbounded minus the configured capacity, two ``simulate`` runs).

Per-day figures scale the log's totals by ``86400 / summary.time_span_s`` (the log's own rate);
money is GPU-hours x the GPU-hour price the simulation used. Actions are ranked by prefill
tokens saved over the log. The console, Markdown and HTML reports all show :func:`next_steps`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefixplan.report import views as v
from prefixplan.savings.prefill import PrefillProfile, load_profile, profile_from_mapping

TARGETS = (0.9, 0.95)
"""Shares of the unbounded hit rate the cache-size action sizes for."""
DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class KVSize:
    """KV bytes per token and where the figure comes from (a model name or a config file)."""

    bytes_per_token: float
    source: str

    def gb(self, tokens: float) -> float:
        """GB (1e9 bytes) of KV memory for ``tokens`` cached tokens."""
        return tokens * self.bytes_per_token / 1e9


@dataclass(frozen=True, slots=True)
class Action:
    """One next step.

    Attributes:
        kind: ``move-dynamic``, ``fix-breaker``, ``pin``, ``size-cache`` or ``reorder-rag``.
        title: what to do (never user-authored text; system/tool context only when not withheld).
        effect: the expected effect, formatted.
        tokens_saved: prefill tokens saved over the log (the ranking key).
        figures: the numbers behind ``effect`` (tokens, GPU-hours/day, $/day, capacities, GB).
        source: the record fields the numbers come from.
    """

    kind: str
    title: str
    effect: str
    tokens_saved: float
    figures: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "title": self.title,
            "effect": self.effect,
            "tokens_saved": self.tokens_saved,
            "figures": dict(self.figures),
            "source": self.source,
        }


def kv_size(record: Mapping[str, Any], override: KVSize | None = None) -> KVSize | None:
    """The KV size for GB figures: ``override`` (``--model`` / ``--model-config``), else the record's
    ``kv_bytes_per_token``, else the built-in table entry of the log's one model, else None."""
    if override is not None:
        return override
    per_token = v.kv_bytes_per_token(record)
    if per_token is not None:
        return KVSize(per_token, "the analysis record")
    models = list(((record.get("inputs") or {}).get("models") or {}).keys())
    if len(models) == 1:
        from prefixplan.errors import UsageError
        from prefixplan.savings.kvsize import lookup_builtin

        try:
            return KVSize(float(lookup_builtin(str(models[0])).bytes_per_token), str(models[0]))
        except UsageError:
            return None
    return None


def resolve_kv(model: str | None = None, model_config: str | None = None) -> KVSize | None:
    """A :class:`KVSize` from a ``--model-config`` file or a built-in ``--model`` name (None without either).

    Raises:
        UsageError: the model is not in the built-in table.
        InputError: the config file cannot be read.
    """
    from prefixplan.savings.kvsize import load_config, lookup_builtin

    if model_config is not None:
        shape = load_config(model_config)
        return KVSize(float(shape.bytes_per_token), str(model_config))
    if model is not None:
        return KVSize(float(lookup_builtin(model).bytes_per_token), model)
    return None


def per_day(record: Mapping[str, Any]) -> float | None:
    """Factor from the log's totals to a day at the log's rate (None when the log has no time span)."""
    span = (record.get("summary") or {}).get("time_span_s")
    return DAY_S / float(span) if isinstance(span, (int, float)) and span > 0 else None


def profile_of(record: Mapping[str, Any]) -> tuple[PrefillProfile, float | None]:
    """The prefill profile and GPU-hour price the record's simulation used (the default profile
    when the record has none)."""
    sim = record.get("simulation") or {}
    data = sim.get("prefill_profile")
    profile = profile_from_mapping(data, "the record's prefill profile") if isinstance(data, Mapping) else None
    if profile is None:
        profile = load_profile(None)
    price = sim.get("gpu_hour_price")
    return profile, float(price) if isinstance(price, (int, float)) else profile.gpu_hour_price


def breaker_gpu_seconds(breaker: Mapping[str, Any], profile: PrefillProfile) -> float:
    """Prefill GPU-seconds a breaker costs over the log: each variant after the first prefills the
    tail (``tail_tokens`` after ``token_offset`` cached tokens) again."""
    tail = float(breaker.get("tail_tokens") or 0)
    offset = float(breaker.get("token_offset") or 0)
    repeats = max(0, int(breaker.get("variants") or 0) - 1)
    return repeats * (profile.b * tail + profile.c * tail * (offset + tail / 2.0)) * profile.gpus


def capacity_for(curve: Sequence[tuple[float, float]], target_rate: float) -> tuple[float, float] | None:
    """``(capacity, hit rate)`` of the smallest swept capacity reaching ``target_rate`` (None if none does)."""
    for cap, rate in sorted(curve):
        if rate >= target_rate - 1e-12:
            return cap, rate
    return None


def _money(gpu_seconds: float | None, scale: float | None, price: float | None) -> dict[str, float | None]:
    if gpu_seconds is None or scale is None:
        return {"gpu_hours_per_day": None, "usd_per_day": None}
    hours = gpu_seconds * scale / 3600.0
    return {"gpu_hours_per_day": hours, "usd_per_day": hours * price if price is not None else None}


def _time_effect(figures: Mapping[str, Any], gpu_seconds: float | None) -> str:
    if figures.get("gpu_hours_per_day") is not None:
        text = f"{figures['gpu_hours_per_day']:,.2f} GPU-hours/day"
        if figures.get("usd_per_day") is not None:
            text += f", ${figures['usd_per_day']:,.2f}/day"
        return text + " at the log's rate"
    if gpu_seconds is not None:
        return f"{gpu_seconds:,.1f} GPU-seconds over the log"
    return ""


def waterfall_step(record: Mapping[str, Any], name: str) -> tuple[int, str] | None:
    """(tokens, "the two runs") of the waterfall's step ``name`` when it was asked and computed."""
    wf = (record.get("simulation") or {}).get("waterfall")
    if not isinstance(wf, Mapping):
        return None
    step = next((s for s in wf.get("steps") or () if s.get("name") == name), None)
    if step is None or not step.get("asked") or step.get("tokens") is None:
        return None
    options = {r["name"]: r["options"] for r in wf.get("runs") or ()}
    a, b = step["difference_of"]
    return int(step["tokens"]), f"{options.get(a, a)} minus {options.get(b, b)}"


def _breaker_actions(record: Mapping[str, Any], profile: PrefillProfile, price: float | None) -> list[Action]:
    scale = per_day(record)
    out = []
    cited = waterfall_step(record, "breakers")
    for i, b in enumerate(v.sorted_breakers(record.get("breakers") or [])):
        cost = int(b.get("cost_tokens") or 0)
        if cost <= 0:
            continue
        secs = breaker_gpu_seconds(b, profile)
        figures: dict[str, Any] = {
            "tokens": cost,
            "tokens_per_day": cost * scale if scale is not None else None,
            "requests": b.get("requests"),
            "gpu_seconds": secs,
            **_money(secs, scale, price),
        }
        context = "" if b.get("withheld") else str(b.get("preview") or "")
        if b.get("kind") == "dynamic-system":
            kind = "move-dynamic"
            title = f"Move the {b.get('pattern')} at {v.breaker_where(b)} after the stable prefix"
        else:
            kind = "fix-breaker"
            if b.get("kind") == "tool-order":
                title = "Fix the cache breaker: send the tools in one fixed order"
            elif b.get("kind") == "tool-content":
                title = (
                    "Fix the cache breaker: send one fixed text for each tool schema (its content varies per request)"
                )
            else:
                title = "Fix the cache breaker: serialize every tool schema with one fixed key order (e.g. sorted keys)"
        if context:
            title += f" (“{context.strip()}…”)"
        effect = (
            f"≈{v.n(cost)} prefill tokens over the log ({v.n(b.get('requests'))} requests, "
            f"{v.n(b.get('variants'))} variants)"
        )
        money = _time_effect(figures, secs)
        effect += f"; {money}" if money else ""
        source = f"breakers[{i}]"
        if cited is not None:
            effect += f"; the waterfall's breakers step, all breakers: {v.n(cited[0])} tokens"
            source += ", simulation.waterfall"
        out.append(Action(kind, title, effect, float(cost), figures, source))
    return out


def _lru_curve(sim: Mapping[str, Any]) -> list[tuple[float, float]]:
    curves = v.sweep(sim)
    return curves.get("lru") or next(iter(curves.values()), [])


def _size_action(record: Mapping[str, Any], kv: KVSize | None, price: float | None) -> Action | None:
    sim = record.get("simulation")
    gens = v.generations(sim)
    curve = _lru_curve(sim) if isinstance(sim, Mapping) else []
    if not curve or "persistent" not in gens or not isinstance(sim, Mapping):
        return None
    unbounded = gens["persistent"]["hit_rate"]
    prompt = float(sim.get("prompt_tokens") or (record.get("summary") or {}).get("prompt_tokens") or 0)
    head = gens.get("headline")
    scale = per_day(record)
    saved_at = {
        float(p["capacity_tokens"]): float(p["gpu_seconds_saved"])
        for p in ((sim.get("savings_curve") or {}).get("lru") or [])
        if isinstance(p, Mapping)
    }
    figures: dict[str, Any] = {
        "unbounded_hit_rate": unbounded,
        "kv_bytes_per_token": kv.bytes_per_token if kv else None,
    }
    parts = []
    gain = 0.0
    for target in TARGETS:
        pct = round(target * 100)
        found = capacity_for(curve, target * unbounded)
        if found is None:
            parts.append(f"more than {v.n(max(c for c, _ in curve))} tokens for {pct}%")
            figures[f"capacity_{pct}_tokens"] = None
            continue
        cap, rate = found
        figures[f"capacity_{pct}_tokens"] = cap
        figures[f"hit_rate_{pct}"] = rate
        figures[f"kv_gb_{pct}"] = kv.gb(cap) if kv else None
        size = f"{v.n(cap)} tokens" + (f" ({kv.gb(cap):,.1f} GB)" if kv else "")
        parts.append(f"{size} for {pct}% ({v.pct(rate)} of tokens)")
        if target == TARGETS[0]:
            secs = saved_at.get(cap)
            figures["gpu_seconds_saved_90"] = secs
            figures.update(_money(secs, scale, price))
            if head is not None and head.get("capacity_tokens") is not None:
                gain = max(0.0, (rate - head["hit_rate"]) * prompt)
    figures["tokens_vs_configured"] = gain
    title = "Size the GPU prefix cache at " + "; ".join(parts)
    effect = f"the unbounded cache reuses {v.pct(unbounded)} of prompt tokens"
    if head is not None and head.get("capacity_tokens") is not None:
        effect += f"; the configured {v.n(head['capacity_tokens'])} tokens reach {v.pct(head['hit_rate'])}"
        if gain > 0:
            effect += f" (+{v.n(round(gain))} prefill tokens over the log at the 90% size)"
    saving = _time_effect(figures, None)
    if saving:
        effect += f"; at the 90% size caching saves {saving}"
    cited = waterfall_step(record, "capacity")
    source = "simulation.curves, simulation.savings_curve"
    if cited is not None:
        figures["waterfall_capacity_tokens"] = cited[0]
        effect += f"; the waterfall loses {v.n(cited[0])} tokens to capacity ({cited[1]})"
        source += ", simulation.waterfall"
    if kv is None:
        effect += "; pass --model or --model-config for GB"
    else:
        effect += f" (KV {v.n(kv.bytes_per_token)} B/token, {kv.source})"
    return Action("size-cache", title, effect, gain, figures, source)


def _pin_action(record: Mapping[str, Any], kv: KVSize | None, price: float | None) -> Action | None:
    pinned = (record.get("simulation") or {}).get("pinned")
    if not isinstance(pinned, Mapping) or not pinned.get("ranks"):
        return None
    ranks = [int(r) for r in pinned["ranks"]]
    gain = float(pinned["hit_tokens"]) - float(pinned["baseline_hit_tokens"])
    if gain <= 0:
        return None  # LRU keeps them resident already: pinning would only shrink the rest of the cache
    tokens = float(pinned["pinned_tokens"])
    secs = float(pinned.get("gpu_seconds_saved_vs_baseline") or 0.0)
    scale = per_day(record)
    figures: dict[str, Any] = {
        "ranks": ranks,
        "tokens": gain,
        "hit_rate_before": pinned["baseline_hit_rate_tokens"],
        "hit_rate_after": pinned["hit_rate_tokens"],
        "pinned_tokens": tokens,
        "kv_gb": kv.gb(tokens) if kv else None,
        "gpu_seconds": secs,
        **_money(secs, scale, price),
    }
    span = f"#{ranks[0]}" if len(ranks) == 1 else f"#{ranks[0]}–#{ranks[-1]}"
    if ranks != list(range(ranks[0], ranks[-1] + 1)):
        span = ", ".join(f"#{r}" for r in ranks)
    memory = f"{v.n(tokens)} tokens" + (f", {kv.gb(tokens):,.2f} GB of KV" if kv else "")
    title = (
        f"Warm and pin prefixes {span} ({memory}) in a {float(pinned['pinned_fraction']):.0%} pinned partition "
        f"of a {v.n(pinned['capacity_tokens'])}-token cache"
    )
    effect = (
        f"hit rate {v.pct(pinned['baseline_hit_rate_tokens'])} → {v.pct(pinned['hit_rate_tokens'])} "
        f"(+{v.n(round(gain))} prefill tokens over the log)"
    )
    money = _time_effect(figures, secs)
    if money:
        effect += f"; {money}"
    return Action("pin", title, effect, gain, figures, "simulation.pinned")


def _rag_action(record: Mapping[str, Any]) -> Action | None:
    w = (record.get("rag") or {}).get("whatif")
    if not isinstance(w, Mapping) or not (w.get("gain_tokens") or 0) > 0:
        return None
    gain = int(w["gain_tokens"])
    title = "Put retrieved documents before the question (documents-first layout)"
    effect = (
        f"+{v.n(gain)} reusable tokens over the log ({v.n(w.get('reusable_tokens_now'))} → "
        f"{v.n(w.get('reusable_tokens'))}; {v.n(w.get('requests_rewritten'))} requests rewritten)"
    )
    figures = {"tokens": gain, "requests_rewritten": w.get("requests_rewritten")}
    return Action("reorder-rag", title, effect, float(gain), figures, "rag.whatif")


ORDER = {"move-dynamic": 0, "fix-breaker": 1, "pin": 2, "reorder-rag": 3, "size-cache": 4}


def next_steps(record: Mapping[str, Any], kv: KVSize | None = None) -> list[Action]:
    """The ranked next steps for an analysis record (JSON form), most prefill tokens saved first.

    Args:
        record: the analysis record (``AnalysisRecord.to_json()``).
        kv: the KV size for GB figures (default: :func:`kv_size` of the record).
    """
    kv = kv_size(record, kv)
    profile, price = profile_of(record)
    actions = _breaker_actions(record, profile, price)
    for extra in (_pin_action(record, kv, price), _rag_action(record), _size_action(record, kv, price)):
        if extra is not None:
            actions.append(extra)
    return sorted(actions, key=lambda a: (-a.tokens_saved if math.isfinite(a.tokens_saved) else 0, ORDER[a.kind]))
