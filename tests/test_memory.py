"""Freed memory goes back to the operating system (glibc on Linux; elsewhere these do nothing)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    from prefixplan.core.memory import map_large_allocations

    def rss():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024

    if sys.argv[1] == "map":
        assert map_large_allocations()
    big = np.ones(30 << 17)  # 30 MiB freed: glibc's own threshold for mapping rises to it
    del big
    base = rss()
    keep, windows = [], []
    for _ in range(40):
        windows.append(np.ones(2 << 17))  # 2 MiB windows, each followed by a small object
        keep.append(np.ones(8))
    del windows
    print(rss() - base)
    """
)


def _growth(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_windows_leave_the_process_when_large_allocations_are_mapped() -> None:
    """With glibc's default, freed 2 MiB windows stay resident behind the small objects between
    them; mapped on their own, they are unmapped when freed."""
    from prefixplan.core.memory import _glibc

    if _glibc("mallopt") is None:
        pytest.skip("no glibc mallopt here")
    assert _growth("map") < 4


ARROW_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from prefixplan.core.memory import map_large_allocations

    if sys.argv[1] == "before":
        import pyarrow
    map_large_allocations()
    import pyarrow

    print(pyarrow.default_memory_pool().backend_name, os.environ.get("ARROW_DEFAULT_MEMORY_POOL"))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
@pytest.mark.parametrize("when", ["before", "after"])
def test_arrow_buffers_use_the_system_allocator_unless_told_otherwise(when: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Mapping large allocations moves Arrow onto the system allocator whether pyarrow was
    imported before or after; a pool the user chose through the environment is kept."""
    from prefixplan.core.memory import _glibc

    if _glibc("mallopt") is None:
        pytest.skip("no glibc mallopt here")
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    out = subprocess.run([sys.executable, "-c", ARROW_SCRIPT, when], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["system", "system"]
    mine = "mimalloc"
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", mine)
    alone = subprocess.run(
        [sys.executable, "-c", "import pyarrow; print(pyarrow.default_memory_pool().backend_name)"],
        capture_output=True,
        text=True,
        check=True,
    )
    out = subprocess.run([sys.executable, "-c", ARROW_SCRIPT, when], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [alone.stdout.strip(), mine]
