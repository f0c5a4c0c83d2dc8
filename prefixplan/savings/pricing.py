"""Money: hosted-API prices with cache read/write multipliers, and self-hosted GPU time.

The price table ships as ``prefixplan/data/prices.yaml`` (dated by ``as_of``); a user file
with the same layout overrides any entry (deep merge). Prices are USD per million input
tokens.

* Anthropic: ``cost = p * (plain + write * write_multiplier[ttl] + read * read_multiplier)``
  where ``write`` are tokens written to the cache (1.25x for 5m, 2x for 1h) and ``read``
  tokens served from it (0.1x).
* OpenAI: ``cost = p * (prompt - cached) + cached_input * cached`` (no write premium).
* Self-hosted: ``GPU-seconds saved / 3600 * GPU-hour price``.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from prefixplan.core import yamlsafe
from prefixplan.errors import InputError, UsageError


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load_prices(override: str | Path | None = None) -> dict[str, Any]:
    """The shipped table, deep-merged with ``override`` when given."""
    import yaml

    text = resources.files("prefixplan").joinpath("data/prices.yaml").read_text(encoding="utf-8")
    table = yamlsafe.load(text)
    if override is not None:
        path = Path(override)
        try:
            extra = yamlsafe.load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise InputError(f"cannot read price file {path}: {exc}") from None
        if not isinstance(extra, dict):
            raise InputError(f"{path}: price file must be a mapping like prefixplan/data/prices.yaml")
        table = _merge(table, extra)
    return table


def model_price(table: dict, provider: str, model: str) -> tuple[str, dict[str, float]]:
    """(matched table key, price entry) for a model name; longest matching key wins."""
    models = (table.get("providers", {}).get(provider) or {}).get("models") or {}
    name = model.lower()
    best = None
    for key in models:
        if (name == key.lower() or name.startswith(key.lower())) and (best is None or len(key) > len(best)):
            best = key
    if best is None:
        raise UsageError(
            f"no {provider} price for model {model!r}",
            hint="add it to a --prices YAML file (layout: prefixplan/data/prices.yaml)",
        )
    return best, {k: float(v) for k, v in models[best].items()}


@dataclass(frozen=True, slots=True)
class Money:
    """Input-token cost with and without prompt caching (USD)."""

    provider: str
    model: str
    as_of: str
    cost_without: float
    cost_with: float
    detail: str

    @property
    def saved(self) -> float:
        return self.cost_without - self.cost_with


def hosted_cost(
    provider: str,
    model: str,
    prompt_tokens: int,
    read_tokens: int,
    write_tokens: int = 0,
    ttl: str = "5m",
    table: dict | None = None,
) -> Money:
    """Cost of ``prompt_tokens`` input tokens of which ``read_tokens`` came from the cache."""
    table = table if table is not None else load_prices()
    key, entry = model_price(table, provider, model)
    per = 1e-6
    price = entry["input"] * per
    without = prompt_tokens * price
    if provider == "anthropic":
        conf = table["providers"]["anthropic"]
        read_mult = float(conf.get("cache_read_multiplier", 0.1))
        write_mult = float((conf.get("cache_write_multiplier") or {}).get(ttl, 1.25))
        plain = prompt_tokens - read_tokens - write_tokens
        with_cache = price * (plain + write_tokens * write_mult + read_tokens * read_mult)
        detail = f"{key}: ${entry['input']:g}/M input, writes x{write_mult:g} ({ttl}), reads x{read_mult:g}"
    elif provider == "openai":
        cached_price = entry.get("cached_input", entry["input"]) * per
        with_cache = price * (prompt_tokens - read_tokens) + cached_price * read_tokens
        detail = f"{key}: ${entry['input']:g}/M input, ${entry.get('cached_input', entry['input']):g}/M cached"
    else:
        raise UsageError(f"unknown provider {provider!r}", hint="use openai or anthropic")
    return Money(provider, key, str(table.get("as_of", "?")), without, with_cache, detail)


def self_hosted_saving(gpu_seconds_saved: float, gpu_hour_price: float) -> float:
    """USD saved by not spending ``gpu_seconds_saved`` GPU-seconds."""
    return gpu_seconds_saved / 3600.0 * gpu_hour_price


def gpu_hour_price(table: dict, gpu: str) -> float | None:
    """Self-hosted GPU-hour price for a GPU label (prefix match), or None."""
    prices = (table.get("self_hosted") or {}).get("gpu_hour") or {}
    for key, value in prices.items():
        if gpu.lower().startswith(key.lower()) or key.lower().startswith(gpu.lower()):
            return float(value)
    return None
