"""Warm engine KV caches with the most valuable prefixes, verify residency, keep them warm.

plan (which prefixes, deepest of each chain, KV budget) -> run (per replica: warm-up, probe,
verify, fleet verdict, store records) -> keepalive (periodic re-warm) ; calibrate (TTFT model).
"""
