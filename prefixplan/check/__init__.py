"""The CI gate: ``prefixplan lock`` and ``prefixplan check``."""
