"""The hash contract (docs/keys.md): golden values, an independent oracle, key parsing."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixplan.errors import UsageError
from prefixplan.keys import (
    CacheKey,
    content_hash,
    parse_key,
    part_hash,
    token_hash,
    token_ids_from_bytes,
    token_ids_to_bytes,
)

# Golden values: if one of these changes, the pp1 contract was broken. Never update them;
# introduce a new scheme tag instead.
GOLDEN_CONTENT = [
    ([], "pp1:sha256:0ccc017506adad8ef1efe2cacb8f138ca846c1eb56aa619f4925fe640eeda09d"),
    ([("system", b"You are helpful.")], "pp1:sha256:64db1945b3a0631bb969b9c7f52de06202e4da539618480c06b9040a0441f55c"),
    (
        [("system", b"You are a helpful assistant."), ("tool", b'{"name":"get_weather"}'), ("document", b"")],
        "pp1:sha256:174fec7609441494159e1e740a47d7b63e61146c70d34e074449ab797c8759bd",
    ),
    ([("a", b"bc")], "pp1:sha256:0dec7b2c5edd1af2d99dde385f6cfc8c5f29208a221ecff76fbb342d63f44273"),
    ([("ab", b"c")], "pp1:sha256:bc1496fd2eb1304efa878d4fe8c4a3a820667498b76c2c44935cc2dba8ac4d3b"),
]
GOLDEN_TOKENS = [
    ("fp", [1, 2, 3], "pp1:tok:sha256:916ed1b530cd819c2d02e76f9c859cd922d459c55c8a7cc61cc832d3da4cb5eb"),
    ("fp", [], "pp1:tok:sha256:83c2343999148254f868859487e30fcb0627c4cb8c670998fb6a19e8a1904947"),
    (
        "qwen3|sha256:abc",
        [151644, 8948, 198, 2610],
        "pp1:tok:sha256:b5980eef616acf0b7020ef522e9673473cf45a10ff98190b9fab861671ea08f9",
    ),
]


def oracle_content(parts: list[tuple[str, bytes]]) -> str:
    """The encoding exactly as docs/keys.md states it, written independently."""
    buf = bytearray(b"prefixplan-content\x00pp1\x00")
    buf += len(parts).to_bytes(8, "big")
    for kind, data in parts:
        k = kind.encode()
        buf += len(k).to_bytes(4, "big") + k + len(data).to_bytes(8, "big") + data
    return "pp1:sha256:" + hashlib.sha256(bytes(buf)).hexdigest()


def oracle_tokens(fp: str, ids: list[int]) -> str:
    f = fp.encode()
    buf = b"prefixplan-tokens\x00pp1\x00" + len(f).to_bytes(4, "big") + f + len(ids).to_bytes(8, "big")
    buf += b"".join(i.to_bytes(4, "little") for i in ids)
    return "pp1:tok:sha256:" + hashlib.sha256(buf).hexdigest()


@pytest.mark.parametrize(("parts", "expected"), GOLDEN_CONTENT)
def test_content_hash_golden(parts: list[tuple[str, bytes]], expected: str) -> None:
    assert content_hash(parts) == expected
    assert oracle_content(parts) == expected


@pytest.mark.parametrize(("fp", "ids", "expected"), GOLDEN_TOKENS)
def test_token_hash_golden(fp: str, ids: list[int], expected: str) -> None:
    assert token_hash(fp, ids) == expected
    assert token_hash(fp, np.asarray(ids, dtype=np.uint32)) == expected
    assert token_hash(fp, np.asarray(ids, dtype=np.int64)) == expected
    assert oracle_tokens(fp, ids) == expected


def test_part_hash_is_plain_sha256() -> None:
    assert part_hash(b"hello") == "sha256:" + hashlib.sha256(b"hello").hexdigest()


def test_no_canonicalisation() -> None:
    a = content_hash([("tool", b'{"a":1,"b":2}')])
    assert a != content_hash([("tool", b'{"b":2,"a":1}')])  # key order is a real change
    assert a != content_hash([("tool", b'{"a": 1, "b": 2}')])  # so is whitespace
    assert content_hash([("system", b"x"), ("tool", b"y")]) != content_hash([("tool", b"y"), ("system", b"x")])
    assert content_hash([("system", b"x")]) != content_hash([("document", b"x")])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["system", "tool", "document", "a", "ab"]), st.binary(max_size=12)), max_size=4),
    st.lists(st.tuples(st.sampled_from(["system", "tool", "document", "a", "ab"]), st.binary(max_size=12)), max_size=4),
)
def test_encoding_is_unambiguous(p: list[tuple[str, bytes]], q: list[tuple[str, bytes]]) -> None:
    assert content_hash(p) == oracle_content(p)
    assert (content_hash(p) == content_hash(q)) == (p == q)


def test_token_ids_roundtrip_and_bounds() -> None:
    ids = [0, 1, 2**32 - 1, 151643]
    blob = token_ids_to_bytes(ids)
    assert blob == struct.pack("<4I", *ids)
    assert token_ids_from_bytes(blob) == ids
    with pytest.raises(ValueError):
        token_ids_to_bytes([-1])
    with pytest.raises(ValueError):
        token_ids_to_bytes([2**32])
    with pytest.raises(TypeError):
        token_hash("fp", b"\x00\x01")  # type: ignore[arg-type]


def test_cache_key_parse_and_str() -> None:
    k = parse_key("support-bot@v3")
    assert k == CacheKey("support-bot", 3)
    assert str(k) == "support-bot@v3"
    assert CacheKey.parse(str(CacheKey("rag.manual_2", 12))) == CacheKey("rag.manual_2", 12)


@pytest.mark.parametrize(
    "bad", ["support-bot", "support-bot@3", "support-bot@v0", "@v1", "a b@v1", "x@v-1", "x@v1x", ""]
)
def test_parse_key_rejects(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_key(bad)


def test_cache_key_validates() -> None:
    with pytest.raises(UsageError):
        CacheKey("-bad", 1)
    with pytest.raises(UsageError):
        CacheKey("ok", 0)


MALFORMED_KEYS = ["x@v0", "x@3", "x@", "x@v", "x@v01x", "@v1", "x@v-1"]


@pytest.mark.parametrize("bad", MALFORMED_KEYS)
def test_every_key_parser_path_rejects_malformed_keys(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One grammar (keys/grammar.py) behind every place a key is read: the library parsers, the
    lock file, warm's key selection (analysis and store), and the CLI."""
    from records import plan_from_record

    from prefixplan.cli.app import main
    from prefixplan.errors import ExitCode, InputError
    from prefixplan.keys import CacheKey, parse_key_ref
    from prefixplan.keys.lockfile import parse_lock_text

    with pytest.raises(UsageError):
        parse_key(bad)
    with pytest.raises(UsageError):
        CacheKey.parse(bad)
    with pytest.raises(UsageError):
        parse_key_ref(bad)
    lock = f'lock_version: 1\nscheme: pp1\nkeys:\n  "{bad}":\n    hash: pp1:sha256:{"0" * 64}\n'
    with pytest.raises(InputError, match="invalid cache key"):
        parse_lock_text(lock)
    record = {
        "candidates": [
            {"rank": 1, "name": "x", "key": "x@v1", "length": 32, "token_ids": list(range(32)), "marginal_tokens": 1}
        ]
    }
    with pytest.raises(UsageError):
        plan_from_record(record, keys=[bad])
    db = str(tmp_path / "k.db")
    for argv in (["keys", "show", bad], ["keys", "history", bad], ["warm", "--keys", bad, "--dry-run"]):
        capsys.readouterr()
        assert main([*argv, "--db", db]) == ExitCode.USAGE, argv
        assert "invalid" in capsys.readouterr().err, argv  # refused as malformed, not as unknown


def test_content_hash_counts_bytes_of_any_memoryview() -> None:
    from array import array

    from prefixplan.keys import content_hash

    data = array("I", [1, 2, 3])
    want = content_hash([("system", bytes(data))])
    assert content_hash([("system", memoryview(data))]) == want == content_hash([("system", bytearray(data))])
