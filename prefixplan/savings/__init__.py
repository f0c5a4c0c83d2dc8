"""Savings model: KV bytes per token, prefill time, money (see docs/simulate.md)."""
