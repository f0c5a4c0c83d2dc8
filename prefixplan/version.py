"""The package version (a leaf: any module may import it)."""

__version__ = "0.1.0"
