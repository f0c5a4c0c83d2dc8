"""Dynamic spans found line by line (and each distinct line once) equal those found in the
whole text, including dates and times that run across line feeds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prefixplan.analysis import dynamic

FRAGMENTS = [
    "Today is Monday",
    "today is,\nFriday",
    "March\n3, 2025",
    "3 Mar\n\n2025",
    "Wednesday,\nSeptember 30th, 2025",
    "12:30:15\nPM",
    "10:45 am",
    "2025-06-01T12:00:00Z",
    "01/02/2025",
    "req_8f2c91ab77d04e",
    "session-\n1234567890",
    "deadbeefcafe12345678",
    "abcdefabcdefabcdef",
    "1712345678",
    "123456789012",
    "550e8400-e29b-41d4-a716-446655440000",
    "Markdown\n",
    "\n",
    "\n\n",
    " ",
    "x",
    "May",
]


def _whole_text(text: str) -> list[tuple[int, int, str, str]]:
    """Each pattern over the whole text, earlier patterns winning overlaps."""
    taken: list[tuple[int, int]] = []
    out = []
    for code, pat, what in dynamic._PATTERNS:
        for m in pat.finditer(text):
            s, e = m.span()
            if what == "hex id" and (m.group(0).isdigit() or m.group(0).isalpha()):
                continue
            if any(s < te and ts < e for ts, te in taken):
                continue
            taken.append((s, e))
            out.append((s, e, code, what))
    return sorted(out)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=20))
def test_line_by_line_equals_the_whole_text(parts: list[str]) -> None:
    text = "".join(parts)
    assert dynamic.find_dynamic(text) == _whole_text(text)
    assert dynamic.find_dynamic(text) == _whole_text(text)  # again, from the line cache


def test_spans_across_line_feeds_are_found() -> None:
    text = "Built on\nMarch\n3, 2025 at 12:30:15\nPM by req_8f2c91ab77d04e."
    found = {(text[s:e], code) for s, e, code, _ in dynamic.find_dynamic(text)}
    assert ("March\n3, 2025", "date-time") in found
    assert ("12:30:15\nPM", "date-time") in found
    assert ("req_8f2c91ab77d04e", "request-id") in found
