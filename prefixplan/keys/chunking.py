"""Cutting documents into chunks whose concatenation is the document (exact slices, so hashing
the chunks loses nothing).
"""

from __future__ import annotations

import re

from prefixplan.keys.recipe_model import CHUNK_MODES


def chunk_text(text: str, by: str = "none", max_chars: int | None = None) -> list[tuple[int, str]]:
    """Split ``text`` into ``(start offset, chunk)`` pieces whose concatenation is ``text``.

    ``by="blank-lines"`` starts a chunk at each line that follows a blank line;
    ``by="headings"`` at each Markdown heading line (``#``..``######``, outside code
    fences); ``max_chars`` then splits longer chunks at the last newline within the limit
    (or hard at the limit). Chunks are exact slices, so hashing them loses nothing.
    """
    if by not in CHUNK_MODES:
        raise ValueError(f"unknown chunk mode {by!r}")
    starts = [0]
    if by != "none" and text:
        offset = 0
        prev_blank = False
        in_fence = False
        for line in text.splitlines(keepends=True):
            stripped = line.strip()
            if by == "blank-lines":
                if stripped and prev_blank and offset > 0:
                    starts.append(offset)
                prev_blank = not stripped
            else:
                if stripped.startswith(("```", "~~~")):
                    in_fence = not in_fence
                elif not in_fence and re.match(r"#{1,6}(\s|$)", line) and offset > 0:
                    starts.append(offset)
            offset += len(line)
    bounds = starts + [len(text)]
    pieces = [(bounds[i], text[bounds[i] : bounds[i + 1]]) for i in range(len(starts))]
    if max_chars:
        # Cut by offsets into ``text`` (slicing the rest of a piece at every cut copied it again
        # and again: quadratic on a big document).
        split: list[tuple[int, str]] = []
        for start, piece in pieces:
            end = start + len(piece)
            while end - start > max_chars:
                cut = text.rfind("\n", start, start + max_chars) + 1
                if cut <= start:
                    cut = start + max_chars
                split.append((start, text[start:cut]))
                start = cut
            split.append((start, text[start:end]))
        pieces = split
    return [(s, p) for s, p in pieces if p] or [(0, text)]
