"""The CI gate: ``prefixplan lock`` (lock.py) and ``prefixplan check`` (check.py), with their findings,
the content diff of a changed key, the cache-breaker lint of recipes, git access and GitHub
annotations, each in its own module."""
