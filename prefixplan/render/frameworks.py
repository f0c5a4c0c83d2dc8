"""Rendering needs a tokenizer, never a model framework.

transformers imports torch (and TensorFlow, JAX and Flax where they are installed) as soon as it
finds them, whatever the caller needs: a fresh process loading the Qwen3 renderer took
2.49-2.75 s with torch 2.13 importable against 1.44-1.49 s without (``benchmarks/bench_scale.py
--startup``), and every render worker paid it again (``USE_TORCH=0`` does not prevent it).
:func:`hide_model_frameworks` marks the frameworks not yet imported as absent in
``sys.modules``, so that transformers' availability checks (``importlib.util.find_spec``) find
none. Only processes of prefixplan's own call it (render
workers, Ray actors, the command line); a library caller's process is left as it is.
"""

from __future__ import annotations

import sys

MODEL_FRAMEWORKS = ("torch", "tensorflow", "jax", "flax")
"""Packages transformers imports when it finds them; a tokenizer uses none of them."""


def hide_model_frameworks() -> tuple[str, ...]:
    """Make the frameworks not imported yet unimportable in this process (an import of one then
    raises ImportError, and ``find_spec`` finds none); returns those hidden. One already
    imported is left alone."""
    hidden = []
    for name in MODEL_FRAMEWORKS:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]
            hidden.append(name)
    return tuple(hidden)
