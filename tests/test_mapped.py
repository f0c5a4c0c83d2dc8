"""Per-request columns in mapped temporary files (prefixplan.trace.storage.mapped)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from prefixplan.trace.storage import mapped
from prefixplan.trace.storage.mapped import (
    ColumnWriter,
    drop_resident,
    is_mapped,
    mapped_copy,
    mapped_empty,
    mapped_gather,
)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.uint64, np.int32, np.int8])
@pytest.mark.parametrize("chunk", [1, 3, 1 << 16])
def test_a_column_reads_back_what_was_appended(dtype: type, chunk: int) -> None:
    rng = np.random.default_rng(chunk)
    values = (rng.random(1000) * 100).astype(dtype)
    col = ColumnWriter(dtype, chunk=chunk)
    for k, v in enumerate(values.tolist()):
        if k % 250 == 0:
            col.extend(values[k : k + 10])
            col.extend(np.zeros(0, dtype))
        col.append(v)
        if k % 7 == 0:
            col.spill()
    expected = np.concatenate(
        [
            np.concatenate([values[k : k + 10], values[k : k + 1]]) if k % 250 == 0 else values[k : k + 1]
            for k in range(1000)
        ]
    )
    assert len(col) == expected.shape[0]
    out = col.finish()
    assert out.dtype == np.dtype(dtype) and out.tolist() == expected.tolist()
    # past one chunk the column went to its file and comes back mapped; under it, in memory
    assert is_mapped(out) == (chunk < 1 << 16)
    assert drop_resident(out) == (1 if is_mapped(out) else 0)
    assert out.tolist() == expected.tolist()  # dropped pages are read in again from the file
    out[:3] = 0  # writable either way
    assert out[:3].tolist() == [0, 0, 0]
    assert len(col) == 0 and col.finish().shape == (0,)  # the writer starts again empty


def test_an_empty_or_closed_column() -> None:
    col = ColumnWriter(np.int64, chunk=1)
    assert col.finish().tolist() == []
    col.extend(np.arange(5))
    assert col.nbytes == 0 and len(col) == 5  # written to the file: nothing buffered
    col.close()
    assert len(col) == 0 and col.finish().tolist() == []


def test_mapped_arrays_hold_the_same_values_as_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    values = rng.integers(0, 1 << 40, 5000)
    index = rng.permutation(5000)
    small = mapped_gather(values, index)
    assert not is_mapped(small) and small.tolist() == values[index].tolist()
    monkeypatch.setattr(mapped, "MIN_MAPPED", 0)
    monkeypatch.setattr(mapped, "GATHER_WINDOW", 7)
    big = mapped_gather(values, index, np.float64)
    assert is_mapped(big) and big.dtype == np.float64 and big.tolist() == values[index].astype(np.float64).tolist()
    copy = mapped_copy(values, np.int32)
    assert is_mapped(copy) and copy.tolist() == values.astype(np.int32).tolist()
    view = copy[10:20]
    assert is_mapped(view) and drop_resident(view, copy) == 1  # one mapping, dropped once
    assert view.tolist() == values[10:20].astype(np.int32).tolist()
    assert mapped_empty(0, np.int64).shape == (0,) and mapped_empty(4, np.int8).tolist() == [0, 0, 0, 0]
    assert drop_resident(np.zeros(3), None, values) == 0  # not mapped: left as they are


RSS_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    from prefixplan.trace.storage.mapped import drop_resident, mapped_empty

    def rss():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024

    base = rss()
    col = mapped_empty(8 << 20, np.int64)  # 64 MiB
    col[:] = np.arange(col.shape[0])
    filled = rss()
    drop_resident(col)
    dropped = rss()
    ok = int(col[::4096].sum()) == int(np.arange(col.shape[0])[::4096].sum())
    print(filled - base, dropped - base, ok)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_dropped_column_leaves_the_resident_set_and_keeps_its_values() -> None:
    out = subprocess.run([sys.executable, "-c", RSS_SCRIPT], capture_output=True, text=True, check=True)
    filled, dropped, ok = out.stdout.split()
    assert float(filled) > 56  # written: resident
    assert float(dropped) < 8  # handed back to the page cache
    assert ok == "True"
