"""What the analysis learns from text and a trace file cannot hold as rows: previews of system
prompts and tool schemas (never users' text), the system-prompt heads lineage naming reads, the
recipe bytes of system/tool parts (content hashes), the cache breakers and the documents-first
what-if. ``analyze --trace-out`` writes them into the trace's metadata, so ``analyze`` of the
trace reports what ``analyze`` of the log reported.

Part bytes are kept up to :data:`META_PART_BYTES` in the file (system prompts and tool schemas
are usually few and short; a candidate whose parts were not kept gets no content hash, as
when the first pass's own budget runs out).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefixplan.analysis.previews import Previews
from prefixplan.analysis.record import TokenizerInfo

META_PART_BYTES = 8 * 2**20


@dataclass
class TextFacts:
    """The text-derived parts of an analysis, as a trace file carries them."""

    previews: Previews
    breakers: list[dict[str, Any]] = field(default_factory=list)
    rag_whatif: dict[str, Any] | None = None
    tokenizers: tuple[TokenizerInfo, ...] = ()
    engine_ids: dict[str, Any] = field(default_factory=dict)
    spec_of: dict[str, str] = field(default_factory=dict)
    encoded: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def to_meta(
        previews: Previews,
        breakers: Sequence[Mapping[str, Any]],
        rag_whatif: Mapping[str, Any] | None,
        engine_ids: Mapping[str, Any],
        spec_of: Mapping[str, str],
        encoded: Mapping[str, int] | None = None,
    ) -> dict[str, Any]:
        """The ``text`` section of a trace's metadata."""
        # System texts (they have a lineage head) and tool schemas (a name, no text length): a
        # tool *result* shares the role "tool" and is a user's text, kept out of the file even
        # when the analysis showed it (--show-user-text).
        shown = {h: p for h, p in previews.previews.items() if h in previews.heads or (p[0] == "tool" and p[2] == 0)}
        parts: dict[str, str] = {}
        used = 0
        for h, data in previews.part_data.items():
            if used + len(data) > META_PART_BYTES:
                break
            parts[h] = base64.b64encode(data).decode("ascii")
            used += len(data)
        return {
            "previews": {h: list(p) for h, p in shown.items()},
            "heads": dict(previews.heads),
            "parts": parts,
            "breakers": [dict(b) for b in breakers],
            "rag_whatif": dict(rag_whatif) if rag_whatif is not None else None,
            "engine_ids": dict(engine_ids),
            "spec_of": dict(spec_of),
            "encoded": dict(encoded or {}),
        }

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> TextFacts:
        """The facts a trace's metadata holds (empty parts when it was written without them)."""
        text = meta.get("text") if isinstance(meta.get("text"), Mapping) else {}
        assert isinstance(text, Mapping)
        previews = Previews()
        for h, p in (text.get("previews") or {}).items():
            if isinstance(p, list) and len(p) == 3:
                previews.previews[str(h)] = (str(p[0]), str(p[1]), int(p[2]))
        previews.heads.update({str(h): str(v) for h, v in (text.get("heads") or {}).items()})
        for h, b64 in (text.get("parts") or {}).items():
            data = base64.b64decode(b64)
            previews.part_data[str(h)] = data
            previews.part_bytes += len(data)
        tokenizers = tuple(
            TokenizerInfo.from_json(t, f"trace tokenizers[{i}]")
            for i, t in enumerate(meta.get("tokenizers") or ())
            if isinstance(t, Mapping)
        )
        return cls(
            previews=previews,
            breakers=[dict(b) for b in text.get("breakers") or () if isinstance(b, Mapping)],
            rag_whatif=dict(text["rag_whatif"]) if isinstance(text.get("rag_whatif"), Mapping) else None,
            tokenizers=tokenizers,
            engine_ids=dict(text.get("engine_ids") or {}),
            spec_of={str(k): str(v) for k, v in (text.get("spec_of") or {}).items()},
            encoded={str(k): int(v) for k, v in (text.get("encoded") or {}).items() if isinstance(v, int)},
        )
