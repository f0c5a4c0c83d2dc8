"""Reference implementations the tests compare the package with (not shipped: the package ranks and
renders another, faster way)."""
