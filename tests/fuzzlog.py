"""Seeded generator of logs that mix good requests with malformed lines of many shapes.

Used by tests/test_fuzz_logs.py (a few thousand lines in CI) and benchmarks/fuzz_logs.py
(100,000+ lines, with timing and peak memory). Every planted line is malformed beyond doubt
(no shape a reader may legitimately accept), so "reported == planted" is an exact check.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM = (
    "You are the support assistant of Fernweh Outdoor. Answer briefly, cite the manual section, "
    "and never promise refunds outside the returns policy. "
) * 8
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Find an order by its id.",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
        },
    }
]


def _chat(rng: random.Random, i: int) -> dict[str, object]:
    body: dict[str, object] = {
        "model": "m",
        "user": f"u{rng.randrange(50)}",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"question {i} {rng.random()}"},
        ],
    }
    if rng.random() < 0.5:
        body["tools"] = TOOLS
    return body


def _good_chat(rng: random.Random, i: int) -> bytes:
    return json.dumps(_chat(rng, i)).encode()


def _good_mooncake(rng: random.Random, i: int) -> bytes:
    shared = list(range(1, 1 + rng.randrange(1, 8)))
    own = [rng.randrange(1000, 2**32) for _ in range(rng.randrange(0, 4))]
    return json.dumps({"timestamp": i * 10, "input_length": 512 * len(shared + own), "hash_ids": shared + own}).encode()


def _truncated(rng: random.Random, i: int) -> bytes:
    text = _good_chat(rng, i)
    return text[: rng.randrange(1, len(text) - 1)]


def _msg(content: object) -> str:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": content}]})


BAD_CHAT: dict[str, Callable[[random.Random, int], bytes]] = {
    "truncated JSON": _truncated,
    "messages not a list": lambda r, i: b'{"model": "m", "messages": "hello"}',
    "content a number": lambda r, i: _msg(r.randrange(10**6)).encode(),
    "content block text a number": lambda r, i: _msg([{"type": "text", "text": 7}]).encode(),
    "JSON list": lambda r, i: b"[1, 2, 3]",
    "JSON scalar": lambda r, i: r.choice([b"5", b'"text"', b"null", b"true"]),
    "invalid UTF-8": lambda r, i: b'{"prompt": "caf\xe9 ' + str(i).encode() + b'"}',
    "binary garbage": lambda r, i: bytes(r.randrange(1, 9) for _ in range(r.randrange(3, 40))),
    "gzip bytes": lambda r, i: b"\x1f\x8b\x08\x00" + bytes(r.randrange(128, 256) for _ in range(20)),
    "deep nesting": lambda r, i: b"[" * 50_000 + b"]" * 50_000,
    "timestamp too large": lambda r, i: b'{"timestamp": 1' + b"0" * 400 + b', "prompt": "x"}',
    "timestamp NaN": lambda r, i: b'{"timestamp": NaN, "prompt": "x"}',
    "timestamp text": lambda r, i: b'{"timestamp": "yesterday-ish", "prompt": "x"}',
    "tools not a list": lambda r, i: json.dumps({**_chat(r, i), "tools": "lookup_order"}).encode(),
    "no body": lambda r, i: json.dumps({"model": "m", "user": "u1"}).encode(),
}

BAD_MOONCAKE: dict[str, Callable[[random.Random, int], bytes]] = {
    "hash id negative": lambda r, i: json.dumps({"timestamp": i, "hash_ids": [1, -r.randrange(1, 2**40)]}).encode(),
    "hash id over uint32": lambda r, i: json.dumps({"timestamp": i, "hash_ids": [2**32 + r.randrange(2**40)]}).encode(),
    "hash id huge": lambda r, i: b'{"timestamp": 1, "hash_ids": [1' + b"0" * 300 + b"]}",
    "hash id a float": lambda r, i: json.dumps({"timestamp": i, "hash_ids": [1, 2.5]}).encode(),
    "hash ids a string": lambda r, i: json.dumps({"timestamp": i, "hash_ids": "1,2,3"}).encode(),
    "input_length negative": lambda r, i: json.dumps({"timestamp": i, "input_length": -5, "hash_ids": [1]}).encode(),
    "timestamp huge": lambda r, i: b'{"timestamp": 1' + b"0" * 400 + b', "hash_ids": [1]}',
    "truncated": lambda r, i: _good_mooncake(r, i)[:-2],
}


@dataclass
class FuzzLog:
    """What was written: total lines, the planted bad lines' numbers and their shapes."""

    path: Path
    lines: int = 0
    planted: dict[int, str] = field(default_factory=dict)


def write_fuzz_log(
    path: str | Path, n_lines: int, *, seed: int, kind: str = "chat", bad_fraction: float = 0.35
) -> FuzzLog:
    """Write ``n_lines`` lines (good and planted bad, by ``seed``) to ``path``."""
    rng = random.Random(seed)
    good, bad = (_good_chat, BAD_CHAT) if kind == "chat" else (_good_mooncake, BAD_MOONCAKE)
    shapes = sorted(bad)
    out = FuzzLog(Path(path))
    with open(path, "wb") as f:
        for i in range(1, n_lines + 1):
            # the first lines are good: format detection reads them, as with any real log
            if i > 5 and rng.random() < bad_fraction:
                shape = shapes[rng.randrange(len(shapes))]
                if shape == "deep nesting" and rng.random() < 0.9:  # 100 KB lines: keep them rare
                    shape = "truncated JSON"
                line = bad[shape](rng, i)
                out.planted[i] = shape
            else:
                line = good(rng, i)
            assert b"\n" not in line and line.strip(), line
            f.write(line + b"\n")
    out.lines = n_lines
    return out
