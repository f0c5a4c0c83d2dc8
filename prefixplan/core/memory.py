"""Handing freed memory back to the operating system between the analysis's large phases.

The block trace, the row store and the ranking allocate and free many arrays of tens to hundreds
of megabytes; glibc keeps much of what is freed in its heap, so the process's resident size
stays near its high-water mark after a phase ends. :func:`release_free_memory` asks glibc
(``malloc_trim``) to return it; elsewhere (macOS, musl) it does nothing. Arrow's own allocator
(reading a trace file) keeps what it freed the same way; its unused memory goes back too when
pyarrow is loaded (about 80 MB after reading a large trace).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from typing import Any


@functools.lru_cache(maxsize=1)
def _trim() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


def release_free_memory() -> bool:
    """Return freed heap memory to the operating system; False where that is not possible."""
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:  # never imported here: only a process that read Parquet has its pool
        arrow.default_memory_pool().release_unused()
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
