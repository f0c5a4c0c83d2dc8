"""What an analysis shows of a prefix: short previews of segment texts, and the typed
:class:`~prefixplan.analysis.record.CandidateRecord` built from a ranked candidate.

Privacy rule (docs/analyze.md): a candidate shared by fewer than ``min_tenants`` distinct users
keeps only counts and hashes (``withheld``); system text and tool names are shown otherwise;
user-authored text (user, assistant, tool results, documents) only with ``show_user_text``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from prefixplan.analysis.candidates import Candidate
from prefixplan.analysis.record import CandidatePart, CandidateRecord, ExampleRef
from prefixplan.core.hashes import content_hash, token_hash
from prefixplan.core.types import Request, Segment
from prefixplan.render.spans import message_text

PREVIEW_CHARS = 80
LINEAGE_HEAD_CHARS = 2000
PART_BYTES_BUDGET = 64 * 2**20
"""Bytes of system texts and tool schemas kept (first seen first) to hash candidates the way a
recipe of the same parts hashes (:func:`part_content_hash`)."""
NAMED_LABELS = ("system", "tools", "system+tools")
_TEXT_KINDS = ("system", "user", "assistant", "tool_result")


class Previews:
    """Short previews per distinct segment text, keyed by the segment's text hash (no text is
    hashed again here), and the head of each system text for lineage naming."""

    def __init__(self, *, user_text: bool = True) -> None:
        # previews of user-authored text are shown only with show_user_text: without it they
        # are not kept (a million agent requests hold millions of distinct messages)
        self.user_text = user_text
        self.previews: dict[str, tuple[str, str, int]] = {}  # text hash -> (role, preview, chars)
        self.heads: dict[str, str] = {}  # system text hash -> its first LINEAGE_HEAD_CHARS chars
        self.part_data: dict[str, bytes] = {}  # system/tool text hash -> the part's recipe bytes
        self.part_bytes = 0
        self.offered: list[str] = []  # every part hash offered to part_data, first seen first
        self.full = False  # a part did not fit the budget: later parts are not kept

    def remember(self, req: Request, segments: Sequence[Segment]) -> None:
        messages = req.messages or ()
        for seg in segments:
            if seg.kind == "template" or seg.text_hash in self.previews:
                continue
            if seg.kind == "tool":
                self.previews[seg.text_hash] = ("tool", seg.name or "tool", 0)
                tools = req.tools or ()
                if seg.index < len(tools):
                    self._keep(seg.text_hash, json.dumps(tools[seg.index], ensure_ascii=False).encode("utf-8"))
            elif seg.kind in _TEXT_KINDS and seg.index < len(messages):
                if seg.kind != "system" and not self.user_text:
                    continue
                msg = messages[seg.index]
                text = message_text(msg.get("content"))
                self.previews[seg.text_hash] = (str(msg.get("role")), short(text), len(text))
                if seg.kind == "system":
                    self.heads[seg.text_hash] = text[:LINEAGE_HEAD_CHARS]
                    self._keep(seg.text_hash, text.encode("utf-8"))

    def _keep(self, text_hash: str, data: bytes | None) -> None:
        """Keep parts first seen first until one does not fit :data:`PART_BYTES_BUDGET`."""
        self.offered.append(text_hash)
        if self.full or data is None or self.part_bytes + len(data) > PART_BYTES_BUDGET:
            self.full = True
            return
        self.part_data[text_hash] = data
        self.part_bytes += len(data)

    def drop(self, known: set[str]) -> None:
        """Forget the segments in ``known`` (their previews reached the merging side with an
        earlier part of the input) and add this part's own to it: merging the rest gives the
        same result, since a merge skips segments it already has."""
        for table in (self.previews, self.heads, self.part_data):
            for text_hash in [h for h in table if h in known]:
                del table[text_hash]
        self.offered = [h for h in self.offered if h not in known]
        known.update(self.previews)

    def merge(self, other: Previews) -> None:
        """Add what ``other`` saw in a later part of the same input (another process's file): the
        result equals one :class:`Previews` fed both parts in turn. ``other`` keeps at least the
        parts this one would have kept of its part (it started from an empty budget), and stops
        no later."""
        for text_hash in other.offered:
            if text_hash not in self.previews:  # one reader would have offered it here
                self._keep(text_hash, other.part_data.get(text_hash))
        for text_hash, preview in other.previews.items():
            self.previews.setdefault(text_hash, preview)
        for text_hash, head in other.heads.items():
            self.heads.setdefault(text_hash, head)


def part_content_hash(
    label: str,
    segments: Sequence[tuple[str, int, int, str | None]],
    rep_segments: Sequence[Segment],
    previews: Previews,
) -> str | None:
    """The ``pp1`` content hash of a system/tools prefix over the bytes a recipe of the same
    parts holds: the system text (UTF-8) and each covered tool schema as
    ``json.dumps(tool, ensure_ascii=False)`` (what ``analyze --emit-recipes`` writes), so the
    version analyze registers and the one ``lock`` registers for the emitted recipe agree.
    ``None`` when the label is not system/tools or a part's bytes were not kept."""
    if label not in NAMED_LABELS:
        return None
    system: list[tuple[str, bytes]] = []
    tools: list[tuple[str, bytes]] = []
    for kind, start, _end, _name in segments:  # token order: templates may render tools first
        if kind not in ("system", "tool") or (kind == "system" and ("system" not in label or system)):
            continue
        seg = next((s for s in rep_segments if s.start == start and s.kind == kind), None)
        data = previews.part_data.get(seg.text_hash) if seg is not None else None
        if data is None:
            return None
        (system if kind == "system" else tools).append((kind, data))
    parts = system + tools  # a recipe's order
    return content_hash(parts) if parts else None


def short(text: str) -> str:
    """``text`` on one line, cut to :data:`PREVIEW_CHARS` characters."""
    text = " ".join(text[: 4 * PREVIEW_CHARS].split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def candidate_record(
    c: Candidate,
    previews: Previews,
    rep_segments: Sequence[Segment],
    rep_tokens: np.ndarray | None,
    example: ExampleRef,
    *,
    min_tenants: int,
    show_user_text: bool,
    fingerprint: str | None,
) -> CandidateRecord:
    """The recorded form of one ranked candidate (privacy rule in the module docstring):
    ``rep_segments`` and ``rep_tokens`` are its representative request's segments and token ids
    cut to the candidate's length (None when they could not be rendered again), ``example``
    where that request was read."""
    shared_enough = c.tenants >= min_tenants or c.tenants_capped
    tokens = rep_tokens if shared_enough else None
    parts: list[CandidatePart] = []
    system_head = None
    if shared_enough:
        for kind, start, end, name in c.segments:
            if kind == "template":
                continue
            seg = next((s for s in rep_segments if s.start == start and s.kind == kind), None)
            prev = previews.previews.get(seg.text_hash) if seg is not None else None
            if kind == "system" and seg is not None and system_head is None:
                system_head = previews.heads.get(seg.text_hash)
            if kind == "tool":
                parts.append(CandidatePart(kind, end - start, name))
            elif kind == "system" or (show_user_text and prev):
                parts.append(CandidatePart(kind, end - start, prev[1] if prev else None))
            else:
                parts.append(CandidatePart(kind, end - start, None))
    return CandidateRecord(
        rank=c.id + 1,
        namespace=c.namespace,
        model=c.namespace.split("|", 1)[0],
        label=c.label,
        kinds=tuple(c.kinds),
        length=c.length,
        raw_length=c.raw_length,
        hits=c.hits,
        tenants=c.tenants,
        tenants_capped=c.tenants_capped,
        first_seen=c.first_seen,
        last_seen=c.last_seen,
        parent=c.parent + 1 if c.parent is not None else None,  # rank of the nesting parent
        reusable_tokens=c.reusable_tokens,
        marginal_tokens=c.marginal_tokens,
        withheld=not shared_enough,
        token_ids=tuple(int(t) for t in tokens) if tokens is not None else None,
        token_hash=token_hash(fingerprint or "", tokens) if tokens is not None else None,
        preview=preview_line(parts) if shared_enough else None,
        parts=tuple(parts),
        system_head=system_head,
        example=example,
        content_hash=part_content_hash(c.label, c.segments, rep_segments, previews) if shared_enough else None,
    )


def preview_line(parts: Sequence[CandidatePart]) -> str:
    """One line: each text part shortened, runs of tools summarised by count and first names."""
    out: list[str] = []
    tools: list[str] = []

    def flush_tools() -> None:
        if tools:
            names = ", ".join(tools[:3]) + (", …" if len(tools) > 3 else "")
            out.append(f"{len(tools)} tool{'s' if len(tools) > 1 else ''} ({names})")
            tools.clear()

    for p in parts:
        if p.kind == "tool":
            tools.append(str(p.text))
            continue
        flush_tools()
        if p.text:
            out.append(f"{p.kind}: {p.text[:60]}")
        else:
            out.append(f"[{p.kind} text, {p.tokens} tokens]")
    flush_tools()
    return " | ".join(out)
