"""prefixplan: make prefix (KV) caching pay off on vLLM and SGLang.

The library owns all logic; :mod:`prefixplan.cli` only parses options and renders results.
"""

__version__ = "0.1.0"
