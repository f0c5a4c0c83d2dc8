"""GzipReader: the same bytes as the standard library, more of them before a truncation."""

from __future__ import annotations

import gzip
import io
import random
import zlib
from types import ModuleType

import pytest

from prefixplan.logs.gunzip import GzipReader, fast_engine
from prefixplan.logs.open import CorruptInput, decompress, iter_lines

ENGINES: list[ModuleType] = [zlib]
if fast_engine() is not zlib:
    ENGINES.append(fast_engine())


def _payload(n: int, seed: int = 0) -> bytes:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", '{"k": 1}', "日本語", "\t"]
    return b"".join((" ".join(rng.choice(words) for _ in range(rng.randint(1, 40))) + "\n").encode() for _ in range(n))


def _read_all(reader: GzipReader, size: int = -1) -> bytes:
    out = []
    while chunk := reader.read1(size):
        out.append(chunk)
    return b"".join(out)


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.__name__)
def test_same_bytes_as_gzip_members_and_padding(engine: ModuleType) -> None:
    a, b = _payload(3000, 1), _payload(500, 2)
    data = gzip.compress(a) + gzip.compress(b, compresslevel=1) + b"\0" * 700
    assert gzip.decompress(data) == a + b
    for size in (-1, 1, 4096, 1 << 20):
        reader = GzipReader(io.BytesIO(data), engine=engine, in_chunk=977)
        assert _read_all(reader, size) == a + b
    assert GzipReader(io.BytesIO(data), engine=engine).read() == a + b


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.__name__)
def test_output_per_call_is_bounded_whatever_the_ratio(engine: ModuleType) -> None:
    data = gzip.compress(b"x" * 50_000_000)
    reader = GzipReader(io.BytesIO(data), engine=engine)
    sizes = []
    while chunk := reader.read1(1 << 20):
        sizes.append(len(chunk))
    assert max(sizes) <= 1 << 20 and sum(sizes) == 50_000_000


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.__name__)
def test_truncation_keeps_every_decodable_byte(engine: ModuleType) -> None:
    payload = _payload(20000, 3)
    data = gzip.compress(payload)
    for cut in (len(data) // 3, len(data) - 40, len(data) - 5):
        reader = GzipReader(io.BytesIO(data[:cut]), engine=engine)
        got = []
        with pytest.raises(EOFError):
            while chunk := reader.read1(1 << 20):
                got.append(chunk)
        kept = b"".join(got)
        assert payload.startswith(kept)
        # zlib itself, fed the whole truncated input, decodes no more than this
        assert len(kept) == len(zlib.decompressobj(31).decompress(data[:cut]))


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.__name__)
def test_corrupt_data_is_bad_gzip_after_the_good_part(engine: ModuleType) -> None:
    first = gzip.compress(_payload(200, 4))
    # ISA-L waits for more header bytes where zlib rejects the method byte: an error either way
    with pytest.raises((gzip.BadGzipFile, EOFError)):
        _read_all(GzipReader(io.BytesIO(b"\x1f\x8b" + b"not gzip at all" * 20), engine=engine))
    # a valid second header, then a deflate block of the reserved type 3
    reader = GzipReader(io.BytesIO(first + b"\x1f\x8b\x08\0\0\0\0\0\0\xff" + b"\xff" * 64), engine=engine)
    assert reader.read1(1 << 24) == gzip.decompress(first)
    with pytest.raises(gzip.BadGzipFile):
        _read_all(reader)


def test_iter_lines_reports_truncation_after_the_lines_read() -> None:
    payload = b"".join(b'{"i": %d}\n' % i for i in range(100_000))
    data = gzip.compress(payload)[:-40]
    lines = []
    with pytest.raises(CorruptInput, match="gzip data corrupt or truncated after line"):
        for line in iter_lines(decompress(io.BytesIO(data)), 1 << 20):
            lines.append(line.data)
    assert len(lines) > 99_000
    assert lines == [b'{"i": %d}' % i for i in range(len(lines))]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.__name__)
def test_truncation_keeps_the_same_bytes_whatever_the_read_size(engine: ModuleType) -> None:
    """A limited call can leave output inside the decompressor once the input is used up (ISA-L
    keeps it there): it is drained before the stream is found truncated, so small and large
    reads give the same bytes."""
    body = b"".join(b'{"x": %d, "pad": "%s"}\n' % (i, b"a" * (i % 500)) for i in range(20_000))
    packed = gzip.compress(body)
    for cut in (50_000, len(packed) - 5):
        outputs = set()
        for size in (7, 7_000, 1 << 20):
            reader, got = GzipReader(io.BytesIO(packed[:cut]), engine=engine), []
            with pytest.raises(EOFError):
                while chunk := reader.read1(size):
                    got.append(chunk)
            outputs.add(b"".join(got))
        assert len(outputs) == 1 and body.startswith(outputs.pop())
