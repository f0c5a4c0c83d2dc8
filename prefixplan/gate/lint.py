"""Cache-breaker lint of declared prefixes (recipes): dynamic content inside a prefix and tool
schemas whose order or key order varies between variants.

Each finding carries its position (part, line, column, character offset into the part and into
the whole prefix) and its cost: the tokens of the prefix after the breaker. Without a tokenizer
the cost is ``ceil(chars / 4)`` and marked approximate.

Checks over one text (:func:`lint_text`, :func:`lint_prefix`): the codes of
:mod:`prefixplan.analysis.dynamic` (``date-time``, ``uuid``, ``request-id``, ``long-number``).

Checks across variants of the same lineage (:func:`lint_tool_variants`, :func:`lint_variants`):

``key-order``     the same tool schema serialised with different JSON key order
``tool-order``    the same tool set in different orders
``divergence``    near-identical prefixes that diverge early (first differing character)
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefixplan.analysis.dynamic import TokenCounter, estimate_tokens, find_dynamic, line_col
from prefixplan.gate.content import part_file
from prefixplan.gate.findings import Finding
from prefixplan.keys.recipe_model import Recipe, display_path
from prefixplan.render.spans import schema_tool_name as tool_name


@dataclass(frozen=True, slots=True)
class LintFinding:
    """One cache breaker.

    ``offset`` is the character offset inside ``part``; ``prefix_offset`` inside the whole
    prefix (all parts concatenated in order). ``cost_tokens`` is the size of the prefix
    after the breaker (approximate when ``cost_exact`` is False).
    """

    code: str
    part: str
    line: int
    column: int
    offset: int
    prefix_offset: int
    match: str
    message: str
    cost_tokens: int
    cost_exact: bool = False
    severity: str = "warning"

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


SECRET_LIKE = ("request-id", "uuid", "long-number")
"""Codes whose matched value may be a credential or a personal id: shown masked, never in full."""


def shown(code: str, value: str) -> str:
    """What a finding may print of a matched value: dates in full, everything id-like masked
    (a recipe naming /proc/self/environ must not put a token into a CI annotation)."""
    if code not in SECRET_LIKE:
        return value
    return f"{value[:4]}…({len(value)} chars)" if len(value) > 6 else "…" * len(value)


def lint_text(
    text: str,
    *,
    part: str = "text",
    after: str = "",
    after_tokens: int | None = None,
    prefix_start: int = 0,
    counter: TokenCounter | None = None,
    ignore: Sequence[str] = (),
    first_line: int = 1,
) -> list[LintFinding]:
    """Find cache breakers in one text.

    Args:
        text: the part's text.
        part: a label for messages (``system``, ``tool[2] parts/x.json``, ...).
        after: the rest of the prefix after this part (adds to each finding's cost) ...
        after_tokens: ... or its token count, when the caller knows it (linear for big prefixes).
        prefix_start: character offset of this part inside the whole prefix.
        counter: a token counter (``len(tokenizer.encode(s))``); else chars/4, approximate.
        ignore: lint codes to skip.
        first_line: line number of the text's first line in its file (chunks).
    """
    findings = []
    tail_tokens, tail_exact = (after_tokens, counter is not None) if after_tokens is not None else (0, True)
    line, line_start, pos = 1, 0, 0  # running line count: each finding costs only the text since the last one
    for s, e, code, what in find_dynamic(text):
        if code in ignore:
            continue
        newlines = text.count("\n", pos, s)
        if newlines:
            line += newlines
            line_start = text.rfind("\n", pos, s) + 1
        pos = s
        col = s - line_start + 1
        if after_tokens is None:
            cost, exact = estimate_tokens(text[s:] + after, counter)
        else:
            own, exact = estimate_tokens(text[s:], counter)
            cost, exact = own + tail_tokens, exact and tail_exact
        approx = "" if exact else "~"
        value = shown(code, text[s:e])
        findings.append(
            LintFinding(
                code=code,
                part=part,
                line=line + first_line - 1,
                column=col,
                offset=s,
                prefix_offset=prefix_start + s,
                match=value,
                message=(
                    f"{what} {value!r} in {part} changes between requests: the "
                    f"{approx}{cost} tokens after it are recomputed every time; move it to the end "
                    "of the prompt (after the cached prefix) or remove it"
                ),
                cost_tokens=cost,
                cost_exact=exact,
            )
        )
    return findings


def lint_prefix(
    parts: Sequence[tuple[str, str]],
    *,
    counter: TokenCounter | None = None,
    ignore: Sequence[str] = (),
    first_lines: Sequence[int] | None = None,
) -> list[LintFinding]:
    """Lint the ordered ``(label, text)`` parts of one prefix; costs count the later parts too."""
    findings: list[LintFinding] = []
    # Tokens of everything after each part, summed from the end: linear in the prefix's size
    # (joining the rest of the prefix for every part was quadratic on big chunked documents).
    sizes = [estimate_tokens(text, counter)[0] for _, text in parts]
    after_tokens = [0] * len(parts)
    for i in range(len(parts) - 2, -1, -1):
        after_tokens[i] = after_tokens[i + 1] + sizes[i + 1]
    start = 0
    for i, (label, text) in enumerate(parts):
        fl = first_lines[i] if first_lines else 1
        findings.extend(
            lint_text(
                text,
                part=label,
                after_tokens=after_tokens[i],
                prefix_start=start,
                counter=counter,
                ignore=ignore,
                first_line=fl,
            )
        )
        start += len(text)
    return findings


def _key_orders(obj: Any, path: str = "$") -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            out.update(_key_orders(v, f"{path}[{i}]"))
    elif isinstance(obj, tuple) and obj and all(isinstance(x, tuple) and len(x) == 2 for x in obj):
        out[path] = tuple(k for k, _ in obj)
        for k, v in obj:
            out.update(_key_orders(v, f"{path}.{k}"))
    return out


def _pairs(text: str) -> Any:
    return json.loads(text, object_pairs_hook=tuple)


def _canon(obj: Any) -> Any:
    if isinstance(obj, tuple) and all(isinstance(x, tuple) and len(x) == 2 for x in obj):
        return tuple(sorted((k, _canon(v)) for k, v in obj))
    if isinstance(obj, list):
        return tuple(_canon(v) for v in obj)
    return obj


def lint_tool_variants(
    variants: Mapping[str, Sequence[str]],
    *,
    lineage: str = "",
    counter: TokenCounter | None = None,
) -> list[LintFinding]:
    """Find tool order and JSON key order that vary between variants of one lineage.

    Args:
        variants: variant label (a request id, a recipe key) -> its tool schemas as written
            (JSON text), in prompt order.
        lineage: the lineage name, for messages.

    Returns:
        ``tool-order`` findings (same tool set, different order; position = first differing
        tool) and ``key-order`` findings (same schema, different key order; position = first
        differing character) -- each reported on the variant that differs from the first.
    """
    findings: list[LintFinding] = []
    labels = list(variants)
    if len(labels) < 2:
        return findings
    ref_label = labels[0]
    ref_tools = list(variants[ref_label])
    ref_by_name = {tool_name(t): t for t in ref_tools}
    for label in labels[1:]:
        tools = list(variants[label])
        names = [tool_name(t) for t in tools]
        ref_names = [tool_name(t) for t in ref_tools]
        joined = "".join(tools)
        if sorted(map(str, names)) == sorted(map(str, ref_names)) and names != ref_names:
            i = next(k for k, (a, b) in enumerate(zip(names, ref_names, strict=False)) if a != b)
            off = sum(len(t) for t in tools[:i])
            cost, exact = estimate_tokens(joined[off:], counter)
            findings.append(
                LintFinding(
                    code="tool-order",
                    part=f"{label} tool[{i}]",
                    line=1,
                    column=1,
                    offset=0,
                    prefix_offset=off,
                    match=str(names[i]),
                    message=(
                        f"{lineage or 'lineage'}: {label} lists tools in a different order than "
                        f"{ref_label} from tool[{i}] ({names[i]} vs {ref_names[i]}); "
                        f"~{cost} tokens after it cannot be shared. Sort tools in one fixed order."
                    ),
                    cost_tokens=cost,
                    cost_exact=exact,
                )
            )
        for i, text in enumerate(tools):
            ref = ref_by_name.get(names[i])
            if ref is None or ref == text:
                continue
            try:
                a, b = _pairs(ref), _pairs(text)
            except ValueError:
                continue
            if _canon(a) != _canon(b):
                continue  # a real content difference, not only order
            oa, ob = _key_orders(a), _key_orders(b)
            path = next((p for p in ob if oa.get(p) != ob[p]), None)
            if path is None:
                continue  # only whitespace differs
            d = next(
                (k for k, (x, y) in enumerate(zip(text, ref, strict=False)) if x != y),
                min(len(text), len(ref)),
            )
            line, col = line_col(text, d)
            off = sum(len(t) for t in tools[:i]) + d
            cost, exact = estimate_tokens(joined[off:], counter)
            findings.append(
                LintFinding(
                    code="key-order",
                    part=f"{label} tool[{i}]",
                    line=line,
                    column=col,
                    offset=d,
                    prefix_offset=off,
                    match=f"{path}: {list(ob[path])}",
                    message=(
                        f"{lineage or 'lineage'}: tool {names[i]} is serialised with a different "
                        f"JSON key order at {path} in {label} than in {ref_label} "
                        f"({list(ob[path])} vs {list(oa[path])}); ~{cost} tokens after it cannot "
                        "be shared. Serialise schemas with one fixed key order."
                    ),
                    cost_tokens=cost,
                    cost_exact=exact,
                )
            )
    return findings


def lint_variants(
    texts: Mapping[str, str],
    *,
    lineage: str = "",
    min_shared: float = 0.5,
    counter: TokenCounter | None = None,
) -> list[LintFinding]:
    """Near-identical prefixes of one lineage that diverge early (logs).

    For each variant that differs from the first, the first differing character is
    reported when the texts still agree on at least ``min_shared`` of the rest
    (``difflib`` ratio of the tails), i.e. when a small dynamic piece -- not a genuinely
    different prompt -- is what breaks sharing. The message names what the differing
    piece looks like (a date, a UUID, ...) when a :func:`lint_text` pattern matches it.
    """
    import difflib

    labels = list(texts)
    findings: list[LintFinding] = []
    if len(labels) < 2:
        return findings
    ref = texts[labels[0]]
    for label in labels[1:]:
        text = texts[label]
        if text == ref:
            continue
        d = next((k for k, (x, y) in enumerate(zip(text, ref, strict=False)) if x != y), min(len(text), len(ref)))
        tail_a, tail_b = text[d:], ref[d:]
        ratio = difflib.SequenceMatcher(None, tail_a[:4000], tail_b[:4000], autojunk=False).ratio()
        if ratio < min_shared:
            continue
        # classify by the breaker pattern whose match covers the divergence, if any
        covering = [
            (ms, me, w) for ms, me, _c, w in find_dynamic(text[max(0, d - 64) : d + 64]) if ms <= min(d, 64) < me
        ]
        what = covering[0][2] if covering else "a varying value"
        s = max(0, d - 64) + covering[0][0] if covering else d
        line, col = line_col(text, d)
        cost, exact = estimate_tokens(text[d:], counter)
        findings.append(
            LintFinding(
                code="divergence",
                part=label,
                line=line,
                column=col,
                offset=d,
                prefix_offset=d,
                match=text[s : s + 40],
                message=(
                    f"{lineage or 'lineage'}: {label} diverges from {labels[0]} at line {line}, "
                    f"column {col} ({what}) although {ratio:.0%} of the rest is shared; "
                    f"~{cost} tokens after it are recomputed."
                ),
                cost_tokens=cost,
                cost_exact=exact,
            )
        )
    return findings


def recipe_lint_findings(recipes: Sequence[Recipe], counter: Any = None) -> list[Finding]:
    out: list[Finding] = []
    for r in recipes:
        texts = [(p.ident, p.data.decode("utf-8", "replace")) for p in r.parts]
        lint = lint_prefix(
            texts,
            counter=counter,
            ignore=r.lint_ignore,
            first_lines=[p.line if p.path is not None else 1 for p in r.parts],
        )
        by_ident = {p.ident: p for p in r.parts}
        for f in lint:
            part = by_ident[f.part]
            file, _ = part_file(r, part)
            line = f.line if part.path is not None else part.line
            out.append(
                Finding(
                    code=f.code,
                    severity="warning",
                    key=str(r.key),
                    part=f.part,
                    file=file,
                    line=line,
                    column=f.column if part.path is not None else None,
                    cost_tokens=f.cost_tokens,
                    message=f"{r.key}: {f.message}",
                )
            )
    groups: dict[tuple[str, ...], list[Recipe]] = defaultdict(list)
    for r in recipes:
        tools = [p for p in r.parts if p.kind == "tool"]
        names = tuple(sorted(str(tool_name(p.data.decode("utf-8", "replace"))) for p in tools))
        if tools:
            groups[names].append(r)
    for rs in groups.values():
        if len(rs) < 2:
            continue
        variants = {str(r.key): [p.data.decode("utf-8", "replace") for p in r.parts if p.kind == "tool"] for r in rs}
        by_key = {str(r.key): r for r in rs}
        for f in lint_tool_variants(variants, lineage="recipes with the same tool set", counter=counter):
            key = f.part.split(" ")[0]
            r = by_key[key]
            out.append(
                Finding(
                    code=f.code,
                    severity="warning",
                    key=key,
                    part=f.part,
                    file=display_path(r.file),
                    line=r.line,
                    cost_tokens=f.cost_tokens,
                    message=f.message,
                )
            )
    return out
