"""GitHub-flavoured Markdown of an analysis record, for PR and CI comments.

Sections in a fixed order: next steps, summary, top prefixes (withheld ones counted in one
line), cache breakers, check/lint findings, malformed lines. Rows are ordered by rank, cost or severity, never by dict or file order, and
nothing time-dependent (creation time, elapsed seconds) is printed, so the same analysis
gives the same comment byte for byte. Text from logs is escaped: it cannot open HTML tags,
break table cells or start Markdown syntax.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from prefixplan.report import views as v
from prefixplan.report.actions import Action, KVSize, kv_size, next_steps

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_escape(text: Any) -> str:
    """Escape ``text`` for a GitHub Markdown table cell: one line, HTML entities, backslashed syntax.

    Inside a cell only inline syntax matters (block syntax needs a line start): code spans,
    emphasis, links, strikethrough and the cell separator are backslash-escaped; ``<``,
    ``>`` and ``&`` become entities; ``@`` becomes ``&#64;`` so log text cannot mention users.
    """
    s = " ".join(("" if text is None else str(text)).split())
    s = html.escape(s, quote=False)
    return _MD_SPECIAL.sub(r"\\\1", s).replace("@", "&#64;")  # no @mentions from log text


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(md_escape(c) for c in cells) + " |"


def _table(head: list[str], rows: list[list[Any]], right: frozenset[int] | set[int] = frozenset()) -> list[str]:
    out = [_row(head), "|" + "|".join("---:" if i in right else "---" for i in range(len(head))) + "|"]
    out += [_row(r) for r in rows]
    return out


def next_steps_markdown(actions: Sequence[Action]) -> list[str]:
    """The ranked next steps as a numbered list (what to do in bold, then its expected effect)."""
    out = ["### Next steps", ""]
    if not actions:
        return [
            *out,
            "Nothing to change: no cache breaker, and the simulated cache reaches the unbounded hit rate.",
            "",
        ]
    for i, a in enumerate(actions, 1):
        out.append(f"{i}. **{md_escape(a.title)}** — {md_escape(a.effect)}")
    return [*out, ""]


md_table = _table
"""A GitHub Markdown table: ``md_table(head, rows, right={column indexes})`` (cells escaped)."""


def render_markdown(
    record: Mapping[str, Any],
    *,
    top: int | None = 10,
    title: str | None = None,
    kv: KVSize | None = None,
    extra: Sequence[str] = (),
) -> str:
    """Render the record as Markdown.

    Args:
        record: the analysis record (optionally with ``simulation`` and check ``findings``).
        top: candidates to list (None = all the record holds).
        title: the heading (default "prefixplan report").
        kv: the KV size for GB figures in the next steps (default: the record's).
        extra: Markdown lines inserted after the next steps (e.g. a comparison with a baseline).

    Returns:
        The Markdown text, ending with a newline.
    """
    s = record.get("summary") or {}
    sim = record.get("simulation")
    inputs = ", ".join(str(p) for p in (record.get("inputs") or {}).get("paths") or []) or "-"
    out = [f"## {md_escape(title or 'prefixplan report')}", "", f"Inputs: {md_escape(inputs)}", ""]
    out += next_steps_markdown(next_steps(record, kv_size(record, kv)))
    out += list(extra)

    out += ["### Summary", ""]
    total = s.get("prompt_tokens") or 0
    rows: list[list[Any]] = [
        ["requests", v.n(s.get("requests"))],
        ["malformed lines skipped", v.n(s.get("malformed_lines"))],
        ["prompt tokens", v.n(total)],
        [
            "covered by shared prefixes",
            f"{v.n(s.get('shared_prefix_tokens'))} "
            f"({v.pct((s.get('shared_prefix_tokens') or 0) / total if total else 0.0)})",
        ],
        [
            "reusable with an infinite cache",
            f"{v.n(s.get('reusable_tokens'))} ({v.pct(s.get('hit_rate_tokens'))} of tokens, "
            f"{v.pct(s.get('hit_rate_requests'))} of requests hit)",
        ],
    ]
    gens = v.generations(sim)
    if "in_batch" in gens:
        rows.append(["hit rate, in-batch sharing only", v.pct(gens["in_batch"]["hit_rate"])])
    if "persistent" in gens:
        rows.append(["hit rate, persistent radix cache (unbounded)", v.pct(gens["persistent"]["hit_rate"])])
    if "headline" in gens:
        h = gens["headline"]
        rows.append([f"hit rate, {h['label']}", v.pct(h["hit_rate"])])
    rows += [[label, value] for label, value in v.savings(sim)]
    rows += [[what, value] for what, value in v.assumptions(record)]
    rows += [["savings model", a] for a in v.savings_assumptions(sim)]
    out += _table(["metric", "value"], rows) + [""]

    waterfall = (sim or {}).get("waterfall")
    if waterfall:
        from prefixplan.report.waterfall import waterfall_markdown

        out += ["### Where the hits go", "", *waterfall_markdown(waterfall), ""]

    cands = list(record.get("candidates") or [])
    cands.sort(key=lambda c: c.get("rank") or 0)
    listed = cands[: top or None]
    out += [f"### Top shared prefixes ({len(listed)} of {v.n(s.get('candidates', len(cands)))})", ""]
    if listed:
        shown, group = v.split_withheld(listed, record)
        rows = []
        for c in shown:
            rows.append(
                [
                    c.get("rank"),
                    c.get("label"),
                    v.n(c.get("length")),
                    v.n(c.get("hits")),
                    v.users(c),
                    v.n(c.get("reusable_tokens")),
                    v.n(c.get("marginal_tokens")),
                    v.n(c.get("parent")),
                    v.safe_preview(c) or "",
                ]
            )
        out += _table(
            ["#", "kind", "tokens", "hits", "users", "reusable", "marginal", "parent", "preview"],
            rows,
            right={0, 2, 3, 4, 5, 6, 7},
        ) + [""]
        if group is not None:
            out += [md_escape(group["text"]) + ".", ""]
    else:
        out += ["No shared prefix met the thresholds.", ""]

    breakers = v.sorted_breakers(record.get("breakers") or [])
    out += ["### Cache breakers", ""]
    if breakers:
        rows = [
            [
                b.get("kind"),
                b.get("pattern"),
                v.breaker_where(b),
                v.n(b.get("requests")),
                "≈" + v.n(b.get("cost_tokens")),
                b.get("preview") or b.get("example") or "",
            ]
            for b in breakers
        ]
        out += _table(["kind", "pattern", "where", "requests", "cost tokens", "context"], rows, right={3, 4}) + [""]
    else:
        out += ["None found.", ""]

    fs = v.findings(record)
    if fs or "findings" in record or "check" in record:
        out += ["### Check and lint findings", ""]
        if fs:
            rows = [
                [
                    f.get("severity"),
                    f.get("code"),
                    ":".join(str(x) for x in (f.get("file"), f.get("line")) if x),
                    f.get("message"),
                    v.n(f.get("cost_tokens")),
                ]
                for f in fs
            ]
            out += _table(["severity", "code", "where", "message", "cost tokens"], rows, right={4}) + [""]
        else:
            out += ["None.", ""]

    errs = record.get("errors") or {}
    if errs.get("count"):
        reasons = ", ".join(f"{k}: {c}" for k, c in sorted((errs.get("by_reason") or {}).items()))
        out += ["### Malformed lines", "", md_escape(f"{errs['count']} line(s) skipped ({reasons})."), ""]
    out.append(
        f"<sub>{md_escape(v.privacy_sentence(record))}. Generated by {md_escape(record.get('tool', 'prefixplan'))}.</sub>"
    )
    return "\n".join(out) + "\n"
