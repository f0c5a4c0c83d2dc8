#!/usr/bin/env python3
"""Generate realistic agent/RAG request logs (OpenAI Chat Completions JSONL).

    python scripts/make_logs.py example            # examples/agent_log.jsonl.gz (+ .docs-first)
    python scripts/make_logs.py bench --out benchmarks/out/bench.jsonl.gz   # 100k requests

Content comes from ../shared/data when present (open-source agent system prompts, GitHub MCP
and BFCL tool schemas, the Rust book for RAG chunks, Arena-Hard user questions; see their
licences there); otherwise from text this script composes itself. The output is fully
determined by the preset, the seed and the content source (printed in the log's first
request metadata and on stdout).

The "example" preset plants what `prefixplan analyze` should find: a support-bot system prompt
whose first line carries a per-request timestamp (a cache breaker), a tool set whose JSON key
order varies, multi-turn conversations, and popular RAG chunks placed after the question. It
also writes the documents-first rewrite of the same log (prefixplan.analysis.rag.reorder_request), so
the RAG what-if can be checked against a real analysis of the rewritten log.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"

PRESETS = {
    # requests, systems, (min,max) system chars, tool sets, multi-turn share, rag share, user chars
    "example": {
        "requests": 400,
        "systems": 4,
        "system_chars": (6000, 16000),
        "toolsets": 4,
        "multi": 0.3,
        "rag": 0.4,
        "user_chars": (150, 1200),
        "users": 14,
        "malformed": True,
        "plant_breakers": True,
        "seed": 20261129,
    },
    "bench": {
        "requests": 100_000,
        "systems": 20,
        "system_chars": (8000, 32000),
        "toolsets": 5,
        "multi": 0.3,
        "rag": 0.4,
        "user_chars": (200, 3200),
        "users": 2000,
        "malformed": False,
        "plant_breakers": False,
        "seed": 7,
    },
}

WORDS = [
    "account",
    "billing",
    "invoice",
    "router",
    "firmware",
    "reset",
    "password",
    "network",
    "latency",
    "cache",
    "token",
    "prompt",
    "deploy",
    "replica",
    "cluster",
    "region",
    "storage",
    "volume",
    "snapshot",
    "backup",
    "restore",
    "quota",
    "limit",
    "upgrade",
    "plan",
    "refund",
    "order",
    "shipment",
    "tracking",
    "warranty",
    "device",
    "sensor",
    "battery",
    "update",
    "release",
    "policy",
    "escalate",
]


@dataclass
class Content:
    source: str
    systems: list[tuple[str, str]]  # (name, text)
    toolsets: list[tuple[str, list[dict]]]
    chunks: list[str]
    questions: list[str]


def _words(rng: random.Random, n_chars: int) -> str:
    out, size = [], 0
    while size < n_chars:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))).capitalize() + "."
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)


def _own_toolset(rng: random.Random, name: str, n: int) -> list[dict]:
    tools = []
    for i in range(n):
        fname = f"{name}_{rng.choice(WORDS)}_{i}"
        props = {
            w: {"type": rng.choice(["string", "integer", "boolean"]), "description": _words(rng, 40)}
            for w in rng.sample(WORDS, rng.randint(2, 5))
        }
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": fname,
                    "description": _words(rng, 120),
                    "parameters": {"type": "object", "properties": props, "required": list(props)[:1]},
                },
            }
        )
    return tools


def load_content(rng: random.Random, preset: dict) -> Content:
    n_sys, (lo, hi) = preset["systems"], preset["system_chars"]
    support = (
        "You are the Acme Cloud support assistant. Be precise, cite the relevant policy section, "
        "and never promise refunds without checking the order.\n\n"
    )
    if SHARED.is_dir():
        prompts = sorted((SHARED / "system_prompts").glob("*.txt"))
        texts = [p.read_text(encoding="utf-8") for p in prompts]
        systems = [("support-bot", support + _words(rng, lo))]
        for i in range(1, n_sys):
            base = texts[i % len(texts)]
            size = rng.randint(lo, hi)
            text = base[:size] if i < len(texts) + 1 else f"Deployment {i}.\n\n" + base[:size]
            if i >= len(texts):
                text = f"[{prompts[i % len(prompts)].stem} variant {i}]\n" + text
            systems.append(
                (prompts[i % len(prompts)].stem.split("__")[0].lower() + (f"-{i}" if i >= len(texts) else ""), text)
            )
        mcp = json.loads((SHARED / "mcp_tools" / "github_mcp_tools_list.json").read_text())
        gh = [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t.get("inputSchema", {}),
                },
            }
            for t in mcp
        ]
        bfcl = [
            json.loads(line)
            for line in (SHARED / "bfcl" / "BFCL_v4_live_multiple.first100.json").read_text().splitlines()
        ]
        fsets = [
            [{"type": "function", "function": _json_schema_types(f)} for f in item["function"]]
            for item in bfcl
            if len(item["function"]) >= 3
        ]
        toolsets = [("github-mcp", gh[:14]), ("github-mcp-wide", gh[14:40])]
        toolsets += [(f"bfcl-{k}", fsets[k]) for k in range(len(fsets))][: max(0, preset["toolsets"] - 2)]
        chunks = []
        for md in sorted((SHARED / "rag_docs" / "rust_book").glob("ch0[4-8]*.md")):
            for para in md.read_text(encoding="utf-8").split("\n\n"):
                if 300 <= len(para) <= 1500 and not para.startswith(("```", "<", "|")):
                    chunks.append(para.strip())
        questions = [
            json.loads(line)["prompt"]
            for line in (SHARED / "user_questions" / "arena_hard_v0.1_question.jsonl").read_text().splitlines()
        ]
        source = "shared/data (system_prompts, mcp_tools, bfcl, rag_docs/rust_book, user_questions)"
    else:
        systems = [("support-bot", support + _words(rng, lo))]
        systems += [
            (f"agent-{i}", f"You are agent {i}.\n\n" + _words(rng, rng.randint(lo, hi))) for i in range(1, n_sys)
        ]
        toolsets = [(f"tools-{k}", _own_toolset(rng, f"t{k}", rng.randint(4, 12))) for k in range(preset["toolsets"])]
        chunks = [_words(rng, rng.randint(300, 1200)) for _ in range(60)]
        questions = [_words(rng, rng.randint(60, 400)) for _ in range(300)]
        source = "generated text (no ../shared/data)"
    return Content(source, systems, toolsets[: preset["toolsets"]], chunks, questions)


def _json_schema_types(obj):
    """BFCL writes Python type names ("dict", "float", "tuple"); servers expect JSON Schema."""
    names = {
        "dict": "object",
        "float": "number",
        "tuple": "array",
        "list": "array",
        "int": "integer",
        "bool": "boolean",
        "str": "string",
        "any": "string",
    }
    if isinstance(obj, dict):
        return {
            k: (names.get(v, v) if k == "type" and isinstance(v, str) else _json_schema_types(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_json_schema_types(v) for v in obj]
    return obj


def _user_text(rng: random.Random, content: Content, lo: int, hi: int) -> str:
    text = rng.choice(content.questions)
    target = rng.randint(lo, hi)
    while len(text) < target:
        text += "\n" + rng.choice(content.questions)
    return text[: max(target, 40)]


def _shuffle_keys(obj):
    if isinstance(obj, dict):
        items = list(obj.items())
        random.Random(len(items) * 7 + len(json.dumps(obj))).shuffle(items)
        return {k: _shuffle_keys(v) for k, v in reversed(items)}
    if isinstance(obj, list):
        return [_shuffle_keys(v) for v in obj]
    return obj


def generate(preset_name: str, out: Path, *, requests: int | None = None) -> dict:
    preset = dict(PRESETS[preset_name])
    if requests:
        preset["requests"] = requests
    rng = random.Random(preset["seed"])
    content = load_content(rng, preset)
    n = preset["requests"]
    t = 1_795_856_400.0  # 2026-11-28T09:00:00Z
    popular = content.chunks[:]
    rng.shuffle(popular)
    popular = popular[:24]
    weights = [1 / (k + 1) for k in range(len(popular))]
    bad = [
        '{"timestamp": 1795856500, "request": {"model": "acme-chat", "messages": [',
        '["not", "an", "object"]',
        '{"request": {"model": "acme-chat", "messages": "hello"}}',
        '{"request": {"model": "acme-chat"}}',
    ]
    bad_at = {37 * (k + 1) + 1: b for k, b in enumerate(bad)} if preset["malformed"] else {}  # 1-based line numbers
    out.parent.mkdir(parents=True, exist_ok=True)
    sink = _Sink(out)
    convs: list[dict] = []  # open multi-turn conversations
    written = 0
    while written < n:
        t += rng.expovariate(1 / 2.0)
        if convs and rng.random() < 0.35:
            conv = convs.pop(rng.randrange(len(convs)))
            conv["messages"].append({"role": "assistant", "content": _user_text(rng, content, 80, 600)})
            conv["messages"].append({"role": "user", "content": _user_text(rng, content, *preset["user_chars"])})
            body = {"model": conv["model"], "messages": conv["messages"], "user": conv["user"]}
            if conv.get("tools"):
                body["tools"] = conv["tools"]
            if conv["turns_left"] > 1:
                conv["turns_left"] -= 1
                convs.append(conv)
        else:
            si = min(int(rng.paretovariate(1.2)) - 1, len(content.systems) - 1)
            name, system = content.systems[si]
            if name == "support-bot" and preset["plant_breakers"]:  # a per-request timestamp on line 1
                stamp = __import__("time").strftime("%Y-%m-%d %H:%M:%S", __import__("time").gmtime(t))
                system = f"Current time: {stamp} UTC\n" + system
            user = f"u{rng.randrange(preset['users']):04d}"
            question = _user_text(rng, content, *preset["user_chars"])
            if rng.random() < preset["rag"]:
                docs = rng.choices(popular, weights=weights, k=3)
                question = f"{question}\n\nUse these documents:\n\n" + "\n\n".join(dict.fromkeys(docs))
            messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
            body = {
                "model": "acme-chat",
                "messages": messages,
                "user": user,
                "max_tokens": rng.choice([256, 512, 1024]),
            }
            if rng.random() < 0.7:
                ti = si % len(content.toolsets)
                tools = content.toolsets[ti][1]
                if ti == 1 and preset["plant_breakers"] and rng.random() < 0.5:  # planted: unstable JSON key order
                    tools = _shuffle_keys(tools)
                body["tools"] = tools
            if rng.random() < preset["multi"]:
                convs.append(
                    {
                        "model": body["model"],
                        "messages": messages,
                        "user": user,
                        "tools": body.get("tools"),
                        "turns_left": rng.randint(1, 3),
                    }
                )
        while sink.lines + 1 in bad_at:
            sink.write(bad_at[sink.lines + 1])
        sink.write(json.dumps({"timestamp": round(t, 3), "request": body}, ensure_ascii=False))
        written += 1
    sink.close()
    info = {"preset": preset_name, "requests": n, "lines": sink.lines, "content": content.source, "out": str(out)}
    if preset_name == "example":
        docs_first = out.with_name(out.name.replace(".jsonl", ".docs-first.jsonl"))
        _write_docs_first(out, docs_first)
        info["docs_first"] = str(docs_first)
    return info


class _Sink:
    """Streams lines to a .jsonl or .jsonl.gz file (gzip mtime 0: byte-identical reruns)."""

    def __init__(self, path: Path) -> None:
        self._raw = path.open("wb")
        self._fh = gzip.GzipFile(fileobj=self._raw, mode="wb", mtime=0) if path.suffix == ".gz" else self._raw
        self.lines = 0

    def write(self, line: str) -> None:
        self._fh.write(line.encode("utf-8") + b"\n")
        self.lines += 1

    def close(self) -> None:
        self._fh.close()
        self._raw.close()


def _write(path: Path, lines: list[str]) -> None:
    data = ("\n".join(lines) + "\n").encode("utf-8")
    if path.suffix == ".gz":
        with gzip.GzipFile(path, "wb", mtime=0) as fh:  # mtime=0: byte-identical reruns
            fh.write(data)
    else:
        path.write_bytes(data)


def _write_docs_first(src: Path, dst: Path) -> None:
    """Rewrite every request documents-first, with chunk counts taken from the log itself."""
    sys.path.insert(0, str(ROOT))
    from prefixplan.analysis.rag import ChunkCounter, reorder_content
    from prefixplan.logs import LineErrors, ReadOptions, iter_requests

    counter = ChunkCounter()
    for req in iter_requests([str(src)], ReadOptions(), LineErrors()):
        counter.add(req)
    counts = counter.recurring()
    out = []
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rt", encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            try:
                rec = json.loads(line)
                msgs = rec["request"]["messages"]
            except (ValueError, KeyError, TypeError):
                out.append(line)  # malformed lines stay as they are
                continue
            if isinstance(msgs, list):
                for m in msgs:
                    if (
                        isinstance(m, dict)
                        and m.get("role") in ("user", "tool", "function")
                        and isinstance(m.get("content"), str)
                    ):
                        new = reorder_content(m["content"], counts)
                        if new is not None:
                            m["content"] = new
            out.append(json.dumps(rec, ensure_ascii=False))
    _write(dst, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset", choices=sorted(PRESETS))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--requests", type=int)
    args = parser.parse_args(argv)
    out = args.out or (
        ROOT / "examples" / "agent_log.jsonl.gz"
        if args.preset == "example"
        else ROOT / "benchmarks" / "out" / "bench.jsonl.gz"
    )
    print(json.dumps(generate(args.preset, out, requests=args.requests), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
