"""Handing freed memory back to the operating system between the analysis's large phases.

The block trace, the row store and the ranking allocate and free many arrays of tens to hundreds
of megabytes; glibc keeps much of what is freed in its heap, so the process's resident size
stays near its high-water mark after a phase ends. :func:`release_free_memory` asks glibc
(``malloc_trim``) to return it; elsewhere (macOS, musl) it does nothing. Arrow's own allocator
(reading a trace file) keeps what it freed the same way; its unused memory goes back too when
pyarrow is loaded (about 80 MB after reading a large trace).

:func:`map_large_allocations` (the command line's process only: it sets a process-wide malloc
parameter) has glibc map every allocation of 1 MiB or more on its own and unmap it when it is
freed. By default glibc raises that threshold up to 32 MiB as large blocks are freed, so the
analysis's windows of a few MiB each end up in the heap, where freed ones are reused only when
the next fits: on the 1M-request benchmark trace the peak was 721 MB with the default and
605 MB with 1 MiB (8 MiB: 657 MB), for about 5% more time (fresh pages for each new window).
It also puts Arrow on the system allocator (unless ``ARROW_DEFAULT_MEMORY_POOL`` says
otherwise), so a trace file's record batches are mapped and unmapped the same way instead of
staying in Arrow's own allocator (mimalloc) between batches: 30 MB less at the peak of
analyzing the 100k-request benchmark trace.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from typing import Any


@functools.lru_cache(maxsize=4)
def _glibc(name: str) -> Any:
    """The C library's function ``name`` (glibc on Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return getattr(libc, name)
    except (OSError, AttributeError):
        return None


M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter for the size from which allocations are mapped on their own."""
MAP_FROM = 1 << 20


def map_large_allocations(threshold: int = MAP_FROM) -> bool:
    """Map allocations of ``threshold`` bytes or more on their own, for the rest of the process
    (module docstring), Arrow's buffers included; False where that is not possible (not glibc)."""
    mallopt = _glibc("mallopt")
    if mallopt is None or not mallopt(M_MMAP_THRESHOLD, int(threshold)):
        return False
    if ARROW_POOL not in os.environ:
        # read when pyarrow is imported: child processes (render workers) inherit it too
        os.environ[ARROW_POOL] = "system"
        arrow = sys.modules.get("pyarrow")
        if arrow is not None:
            arrow.set_memory_pool(arrow.system_memory_pool())
    return True


ARROW_POOL = "ARROW_DEFAULT_MEMORY_POOL"
"""The environment variable pyarrow reads at import for its default allocator."""


def release_free_memory() -> bool:
    """Return freed heap memory to the operating system; False where that is not possible."""
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:  # never imported here: only a process that read Parquet has its pool
        arrow.default_memory_pool().release_unused()
    trim = _glibc("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True
