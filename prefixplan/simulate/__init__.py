"""Replay request streams through prefix-cache models (see docs/simulate.md)."""
