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
