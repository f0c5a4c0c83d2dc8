"""A log kept as many files, cut from the bundled example log: what the executors and the file
shards are tested on (some files gzip, some with malformed lines, one with nothing readable, one
request the tokenizer rejects)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"

# a tool call id the Mistral template rejects: a render failure, not a line error of the reader
REJECTED = {
    "model": "m",
    "messages": [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ],
}


def split_example(folder: Path, files: int = 24) -> list[Path]:
    """Cut the example log into ``files`` files in ``folder`` (in order, names sort like the
    order); every third file is gzip, some get malformed lines or a rejected request, and file 5
    holds only malformed lines. Returns the files in order."""
    lines = gzip.open(EXAMPLE, "rt", encoding="utf-8").read().splitlines()
    folder.mkdir(parents=True, exist_ok=True)
    per = -(-len(lines) // files)
    out = []
    for i in range(files):
        chunk = lines[i * per : (i + 1) * per]
        if i % 5 == 2:
            chunk.insert(min(3, len(chunk)), '{"request": {"model": "m", "messages": [')  # bad JSON
        if i % 7 == 3:
            chunk.append("[1, 2, 3]")  # not an object
        if i % 6 == 4:
            chunk.insert(1, json.dumps(REJECTED))
        if i == 5:
            chunk = ["not json at all", '{"model": "m"}']
        data = ("\n".join(chunk) + "\n").encode()
        path = folder / (f"part-{i:03d}.jsonl" + (".gz" if i % 3 == 0 else ""))
        path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
        out.append(path)
    return out


def clean(record: dict[str, Any]) -> dict[str, Any]:
    """A record without its run metadata (when it ran, for how long)."""
    record = json.loads(json.dumps(record))
    record.pop("created", None)
    record["summary"].pop("elapsed_s", None)
    record["summary"].pop("encoded", None)  # run metadata: what each render process reused
    return record
