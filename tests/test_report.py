"""HTML and Markdown reports: self-contained, escaped, private, and drawn from the record's numbers."""

from __future__ import annotations

import copy
import gzip
import itertools
import json
import math
import random
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from prefixplan.cli.app import main
from prefixplan.report import views
from prefixplan.report.html import render_html
from prefixplan.report.markdown import md_escape, render_markdown

EVIL = '<script>alert("x")</script>"><img src=x onerror=alert(1)></script><!--'
SYSTEM = (
    "You are a careful assistant for the Example Corp help desk. Answer briefly, cite the handbook, "
    "and never reveal internal ticket numbers. " * 4
) + EVIL


def _chat(user: str, who: str, system: str = SYSTEM) -> dict:
    return {
        "request": {
            "model": "m",
            "user": who,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
    }


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory) -> dict:
    """A real record from the analyze pipeline on a small log with hostile text in it."""
    from prefixplan.api import analyze

    d = tmp_path_factory.mktemp("log")
    rows = [_chat(f"question {i} about invoices and refunds, please", f"u{i % 3}") for i in range(6)]
    # a prefix only one user sends: withheld by the privacy rule
    lonely = "PRIVATE-ONLY-ONE-USER " * 30
    rows += [_chat(f"q{i}", "solo", system=lonely) for i in range(3)]
    path = d / "log.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("\n".join(json.dumps(r) for r in rows) + "\n{bad json " + EVIL + "\n")
    return analyze(str(path), rag_whatif=False).to_json()


CAPS = [100_000, 300_000, 1_000_000, 3_000_000, 10_000_000]
RATES = {"lru": [0.1, 0.2, 0.4, 0.5, 0.54], "lfu": [0.12, 0.25, 0.41, 0.5, 0.54]}


def _run(label, policy, cap, rate):
    return {
        "label": label,
        "policy": policy,
        "capacity_tokens": cap,
        "granularity": "vllm: full 16-token blocks",
        "prompt_tokens": 8000,
        "hit_tokens": int(rate * 8000),
        "prefill_tokens_computed": 8000 - int(rate * 8000),
        "hit_rate_tokens": rate,
        "hit_rate_requests": min(1.0, rate * 1.5),
        "requests_hit": 3,
        "evictions_blocks": 0,
    }


# shaped like prefixplan.simulation.to_json output (test_real_simulation_renders checks the real one)
SIM = {
    "granularity": "vllm: full 16-token blocks only, last prompt token never reused",
    "requests": 9,
    "prompt_tokens": 8000,
    "headline": "lru 1e+06 tok",
    "in_batch": "in-batch sharing (generation a)",
    "persistent": "radix cache, unbounded (generation b)",
    "runs": [
        _run("in-batch sharing (generation a)", "in-batch", None, 0.125),
        _run("radix cache, unbounded (generation b)", "infinite", None, 0.5),
    ]
    + [
        _run(f"{p} {c:.0e} tok".replace("e+0", "e+0"), p, float(c), r)
        for p, rs in RATES.items()
        for c, r in zip(CAPS, rs, strict=False)
    ],
    "curves": {
        p: [
            {"capacity_tokens": float(c), "hit_rate_tokens": r, "hit_rate_requests": r}
            for c, r in zip(CAPS, rs, strict=False)
        ]
        for p, rs in RATES.items()
    },
    "savings": {
        "profile": "h100-8b",
        "profile_is_assumption": True,
        "gpu_seconds_without": 100.0,
        "gpu_seconds_with": 87.5,
        "gpu_seconds_saved": 12.5,
        "ttft_p50_without_s": 0.8,
        "ttft_p95_without_s": 2.1,
        "ttft_p50_with_s": 0.3,
        "ttft_p95_with_s": 1.2,
        "queueing_modelled": False,
    },
    "money": {
        "provider": "openai",
        "model": "gpt-4.1",
        "prices_as_of": "2025-06-01",
        "usd_without": 5.0,
        "usd_with": 1.8,
        "usd_saved": 3.2,
        "detail": {},
    },
    "self_hosted_usd_saved": 0.0087,
    "kv_bytes_per_token": 131072,
    "risk": [],
    "notes": ["TTFT is prefill time (+ tier loads) only: queueing is not modelled"],
}


class _Doc(HTMLParser):
    """Collects elements with their attributes and the text of <script> elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.scripts: list[tuple[dict, str]] = []
        self._in_script: dict | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = dict(attrs)
            self.scripts.append((self._in_script, ""))

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = None

    def handle_data(self, data):
        if self._in_script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)
        else:
            self.text.append(data)

    def handle_comment(self, data):
        raise AssertionError(f"unexpected HTML comment (escaping failed?): {data[:60]}")


def parse(page: str) -> _Doc:
    doc = _Doc()
    doc.feed(page)
    doc.close()
    return doc


def embedded(doc: _Doc) -> dict:
    (data,) = [text for attrs, text in doc.scripts if attrs.get("id") == "pp-data"]
    return json.loads(data)


def test_page_is_self_contained(analyzed):
    page = render_html({**analyzed, "simulation": SIM})
    doc = parse(page)
    urls = [
        (tag, k, val)
        for tag, attrs in doc.elements
        for k, val in attrs.items()
        if k in ("src", "href", "xlink:href", "action", "srcset", "poster", "data")
    ]
    assert urls == [("link", "href", "data:,")]  # the empty favicon, so the browser fetches none
    assert not re.search(r"@import|url\(|https?://", page)
    assert sum(tag == "script" for tag, _ in doc.elements) == 2  # the data block and the inline script
    csp = [a["content"] for t, a in doc.elements if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]


def test_log_text_cannot_inject_html(analyzed):
    rec = copy.deepcopy(analyzed)
    rec["inputs"]["paths"] = [EVIL]
    rec["tokenizer"]["label"] = EVIL
    rec["candidates"][0]["label"] = EVIL
    rec["breakers"] = [
        {
            "kind": EVIL,
            "pattern": EVIL,
            "requests": 3,
            "variants": 2,
            "line": 1,
            "column": 2,
            "token_offset": 0,
            "cost_tokens": 10,
            "example": EVIL,
            "preview": EVIL,
        }
    ]
    rec["findings"] = [{"severity": "warning", "code": EVIL, "message": EVIL, "file": EVIL, "line": 3}]
    rec["kinds"][EVIL] = {"tokens": 5, "reused": 1}
    page = render_html(
        {
            **rec,
            "simulation": {
                **SIM,
                "curves": {EVIL: [{"capacity_tokens": 1, "hit_rate_tokens": 0.1}]},
                "notes": [EVIL],
                "money": {**SIM["money"], "model": EVIL},
            },
        }
    )
    doc = parse(page)
    tags = [t for t, _ in doc.elements]
    assert "img" not in tags and tags.count("script") == 2
    assert not [k for _, a in doc.elements for k in a if k.startswith("on")]
    # the hostile text is shown, as text
    assert any(EVIL in t for t in doc.text)
    assert embedded(doc)["candidates"][0]["label"] == EVIL
    (data,) = [t for a, t in doc.scripts if a.get("id") == "pp-data"]
    assert "<" not in data and ">" not in data


def test_privacy_rule_is_applied_and_stated(analyzed):
    rec = copy.deepcopy(analyzed)
    withheld = [c for c in rec["candidates"] if c["withheld"]]
    shown = [c for c in rec["candidates"] if not c["withheld"]]
    assert withheld and shown, "the fixture log has both kinds"
    # even if a record carried text or ids for a withheld prefix, the reports must not show them
    for c in withheld:
        c["preview"] = "SECRET-PREVIEW"
        c["parts"] = [{"kind": "system", "tokens": 16, "text": "SECRET-PART"}]
        c["token_ids"] = [987654, 876543]
    for out in (render_html(rec), render_markdown(rec, top=None)):
        assert "SECRET" not in out and "PRIVATE-ONLY-ONE-USER" not in out
        assert "987654" not in out and "876543" not in out
        assert "min_tenants = 2" in out.replace("min\\_tenants", "min_tenants")
    page = render_html(rec)
    # no token ids at all on the page (the record holds them for shared prefixes)
    some_id = str(shown[0]["token_ids"][5])
    assert f'"{some_id}"' not in page and f"[{some_id}," not in page
    doc = parse(page)
    # withheld prefixes are one grouped row: their count and ranks, no row (and no text) of their own
    assert not [a for t, a in doc.elements if t == "tr" and a.get("data-rank") == str(withheld[0]["rank"])]
    (group,) = [a for t, a in doc.elements if t == "tr" and "withheld-group" in (a.get("class") or "")]
    assert group["data-withheld"] == "true" and int(group["data-withheld-count"]) == len(withheld)
    assert group["data-ranks"].split(",") == [str(c["rank"]) for c in withheld]
    assert int(group["data-reusable"]) == sum(c["reusable_tokens"] for c in withheld)
    assert shown[0]["preview"] in doc.text  # a shared prefix's preview is shown (escaped, as one cell)
    md = render_markdown(rec, top=None)
    assert f"{len(withheld)} single-user prefix" in md and f"{sum(c['reusable_tokens'] for c in withheld):,}" in md


def test_embedded_data_equal_the_record(analyzed):
    rec = {**analyzed, "simulation": SIM}
    doc = parse(render_html(rec))
    data = embedded(doc)
    kinds = {k["kind"]: (k["tokens"], k["reused"]) for k in data["kinds"]}
    assert kinds == {k: (x["tokens"], x["reused"]) for k, x in analyzed["kinds"].items()}
    assert [k["kind"] for k in data["kinds"]] == [k for k in views.KIND_ORDER if k in kinds] + sorted(
        k for k in kinds if k not in views.KIND_ORDER
    )
    assert data["sweep"] == {
        p: [[float(c), r] for c, r in zip(CAPS, rates, strict=False)] for p, rates in RATES.items()
    }
    assert data["configured_capacity"] == 1_000_000
    assert data["generations"]["in_batch"]["hit_rate"] == 0.125
    assert [c["rank"] for c in data["candidates"]] == [c["rank"] for c in analyzed["candidates"]]
    assert data["summary"]["prompt_tokens"] == analyzed["summary"]["prompt_tokens"]
    # bar segments drawn to scale
    segs = [a for t, a in doc.elements if t == "rect" and a.get("class") == "pp-kind"]
    total = sum(int(a["data-tokens"]) for a in segs)
    assert total == analyzed["summary"]["prompt_tokens"]
    for a in segs:
        assert float(a["width"]) == pytest.approx(int(a["data-tokens"]) / total * 680, abs=0.01)


def test_capacity_points_map_back_to_the_record(analyzed):
    doc = parse(render_html({**analyzed, "simulation": SIM}))
    (svg,) = [a for t, a in doc.elements if t == "svg" and a.get("id") == "pp-capacity"]
    assert svg["data-x-scale"] == "log"
    # the record knows the KV size (131,072 B/token): the x axis is KV memory in GB
    assert svg["data-x-unit"] == "GB" and float(svg["data-bytes-per-token"]) == SIM["kv_bytes_per_token"]
    per = SIM["kv_bytes_per_token"] / 1e9  # GB per token
    lo, hi = math.log10(float(svg["data-x-min"])), math.log10(float(svg["data-x-max"]))
    left, top, w, h = (float(svg[k]) for k in ("data-left", "data-top", "data-width", "data-height"))
    pts = [a for t, a in doc.elements if t == "circle" and a.get("class") == "pp-pt"]
    assert len(pts) == 10
    for a in pts:
        cap = 10 ** (lo + (float(a["cx"]) - left) / w * (hi - lo)) / per
        rate = 1 - (float(a["cy"]) - top) / h
        i = CAPS.index(int(float(a["data-capacity"])))
        assert cap == pytest.approx(CAPS[i], rel=0.01)
        assert rate == pytest.approx(RATES[a["data-policy"]][i], abs=0.005)
    markers = [a for t, a in doc.elements if t == "line" and a.get("class") == "pp-cap-marker"]
    marker = next(a for a in markers if a.get("x1") == markers[0]["x1"])
    assert float(marker["data-capacity"]) == 1_000_000
    cap = 10 ** (lo + (float(marker["x1"]) - left) / w * (hi - lo)) / per
    assert cap == pytest.approx(1_000_000, rel=0.01)
    # without a KV size the axis is in tokens
    no_kv = parse(render_html({**analyzed, "simulation": {**SIM, "kv_bytes_per_token": None}}))
    (svg,) = [a for t, a in no_kv.elements if t == "svg" and a.get("id") == "pp-capacity"]
    assert svg["data-x-unit"] == "tokens" and float(svg["data-x-max"]) == max(CAPS)


def test_without_simulation_the_parts_are_left_out(analyzed):
    page = render_html({k: v for k, v in analyzed.items() if k != "simulation"})
    assert 'id="pp-capacity"' not in page and "not simulated" in page
    assert "KV memory" not in page
    with_sim = render_html({**analyzed, "simulation": SIM})
    assert "KV memory" in with_sim and "800 ms → 300 ms" in with_sim and "$3.20 (openai gpt-4.1 prices)" in with_sim
    assert (
        "prefill profile h100-8b (an assumption, not measured)" in with_sim and "queueing is not modelled" in with_sim
    )
    assert "12.50 s (100.00 s → 87.50 s)" in with_sim and "3,200 of 8,000" in with_sim


def test_simulation_views():
    gens = views.generations(SIM)
    assert {k: g["hit_rate"] for k, g in gens.items()} == {"in_batch": 0.125, "persistent": 0.5, "headline": 0.4}
    assert views.configured_capacity(SIM) == 1_000_000
    shuffled = {**SIM, "curves": {p: list(reversed(pts)) for p, pts in reversed(list(SIM["curves"].items()))}}
    assert (
        views.sweep(shuffled)
        == views.sweep(SIM)
        == {p: [(float(c), r) for c, r in zip(CAPS, rs, strict=False)] for p, rs in RATES.items()}
    )
    assert list(views.sweep(shuffled)) == ["lru", "lfu"]
    assert views.sweep({"curves": {"lru": [{"capacity_tokens": None, "hit_rate_tokens": 0.5}]}}) == {}
    assert views.sweep(None) == {} and views.generations(None) == {} and views.savings(None) == []
    assert views.configured_capacity({**SIM, "headline": SIM["persistent"]}) is None
    assert "headline" not in views.generations({**SIM, "headline": SIM["persistent"]})


def test_real_simulation_renders(analyzed):
    """The simulate stage's own to_json output renders, and its curves are what is plotted."""
    import numpy as np

    from prefixplan.simulation import CacheModel, SimConfig, SimRequest, replay_requests, to_json

    rng = np.random.default_rng(3)
    shared = rng.integers(0, 50_000, 160, dtype=np.uint32)
    reqs = [
        SimRequest(float(i), "m", np.concatenate([shared, rng.integers(0, 50_000, 40, dtype=np.uint32)]), index=i)
        for i in range(30)
    ]
    sim = to_json(
        replay_requests(reqs, SimConfig(cache=CacheModel(capacities=(200.0, 1000.0, 5000.0), policies=("lru", "fifo"))))
    )
    doc = parse(render_html({**analyzed, "simulation": sim}))
    data = embedded(doc)
    assert data["sweep"] == {
        p: [[pt["capacity_tokens"], pt["hit_rate_tokens"]] for pt in pts] for p, pts in sim["curves"].items()
    }
    assert data["generations"]["persistent"]["hit_rate"] == next(
        r["hit_rate_tokens"] for r in sim["runs"] if r["label"] == sim["persistent"]
    )
    assert len([a for t, a in doc.elements if t == "circle"]) == 6
    md = render_markdown({**analyzed, "simulation": sim})
    assert "hit rate, in-batch sharing only" in md and "TTFT p50" in md


def test_icicle_children_sit_inside_their_parents():
    cands = [
        {"rank": 1, "parent": None, "hits": 50, "length": 100, "label": "system"},
        {"rank": 2, "parent": 1, "hits": 30, "length": 200, "label": "system+tools"},
        {"rank": 3, "parent": 1, "hits": 15, "length": 300, "label": "system+tools"},
        {"rank": 4, "parent": 2, "hits": 10, "length": 400, "label": "history"},
        {"rank": 5, "parent": 99, "hits": 20, "length": 64, "label": "tools"},  # parent not listed
        {"rank": 6, "parent": None, "hits": 40, "length": 64, "label": "tools"},
    ]
    nodes = views.icicle({"summary": {"requests": 200}, "candidates": cands})
    by = {nd["rank"]: nd for nd in nodes}
    assert by[None]["x0"] == 0 and by[None]["x1"] == 1
    for c in cands:
        nd, parent = by[c["rank"]], by[c["parent"] if c["parent"] in by else None]
        assert parent["x0"] - 1e-12 <= nd["x0"] <= nd["x1"] <= parent["x1"] + 1e-12
        assert nd["depth"] == parent["depth"] + 1
    assert by[1]["x1"] - by[1]["x0"] == pytest.approx(50 / 200)
    assert by[2]["x1"] - by[2]["x0"] == pytest.approx(30 / 200)  # widths are shares of all requests
    # siblings never overlap
    level1 = sorted((nd for nd in nodes if nd["depth"] == 1), key=lambda nd: nd["x0"])
    assert all(a["x1"] <= b["x0"] + 1e-12 for a, b in itertools.pairwise(level1))
    # children wider than the parent allows are scaled down to fit
    over = views.icicle(
        {
            "summary": {"requests": 10},
            "candidates": [
                {"rank": 1, "parent": None, "hits": 10},
                {"rank": 2, "parent": 1, "hits": 8},
                {"rank": 3, "parent": 1, "hits": 8},
            ],
        }
    )
    assert max(nd["x1"] for nd in over) <= 1 + 1e-12


def test_markdown_is_stable_and_ordered(analyzed):
    rec = {
        **analyzed,
        "simulation": SIM,
        "findings": [
            {"severity": "warning", "code": "PP201", "message": "b", "file": "r.yaml", "line": 2},
            {"severity": "error", "code": "PP101", "message": "a", "file": "r.yaml", "line": 9},
            {"severity": "warning", "code": "PP200", "message": "c", "file": "a.yaml", "line": 1},
        ],
    }
    md = render_markdown(rec)
    assert md == render_markdown(copy.deepcopy(rec))
    shuffled = copy.deepcopy(rec)
    for key in ("candidates", "findings", "breakers"):
        random.Random(7).shuffle(shuffled[key])
    shuffled["created"] = "2099-01-01T00:00:00Z"
    shuffled["summary"]["elapsed_s"] = 99.0
    assert render_markdown(shuffled) == md
    heads = [line for line in md.splitlines() if line.startswith("### ")]
    assert [h.split(" (")[0] for h in heads] == [
        "### Next steps",
        "### Summary",
        "### Top shared prefixes",
        "### Cache breakers",
        "### Check and lint findings",
        "### Malformed lines",
    ]
    codes = re.findall(r"\| (PP\d+) \|", md)
    assert codes == ["PP101", "PP200", "PP201"]  # errors first, then by file and line
    assert "| hit rate, in-batch sharing only | 12.5% |" in md
    assert "| hit rate, persistent radix cache (unbounded) | 50.0% |" in md
    assert "| hit rate, lru 1e+06 tok | 40.0% |" in md


def test_markdown_cells_cannot_break_out(analyzed):
    rec = copy.deepcopy(analyzed)
    shown = next(c for c in rec["candidates"] if not c["withheld"])
    shown["preview"] = "a | b\n## heading `code` *em* @someone " + EVIL
    md = render_markdown(rec, top=None)
    line = next(ln for ln in md.splitlines() if ln.startswith(f"| {shown['rank']} |"))
    assert len(re.findall(r"(?<!\\)\|", line)) == 10  # 9 columns, no extra cell from the preview
    assert "<script>" not in md and "<img" not in md and "@someone" not in md
    assert "&lt;script&gt;" in md and "\\`code\\`" in md and "\\*em\\*" in md
    assert md_escape("x\ny") == "x y"


def _write(tmp: Path, name: str, data) -> Path:
    p = tmp / name
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return p


def test_report_command(analyzed, tmp_path, capsys):
    rec = _write(tmp_path, "a.json", analyzed)
    check = _write(
        tmp_path,
        "check.json",
        {
            "exit_code": 1,
            "ok": False,
            "findings": [
                {
                    "severity": "error",
                    "code": "PP-LOCK",
                    "message": "system prompt changed without a version bump",
                    "file": "recipes/support.yaml",
                    "line": 4,
                    "cost_tokens": 300,
                }
            ],
        },
    )
    html_out, md_out = tmp_path / "out" / "r.html", tmp_path / "out" / "r.md"
    assert main(["report", str(rec), "--html", str(html_out), "--markdown", str(md_out), "--check", str(check)]) == 0
    assert "wrote html report" in capsys.readouterr().out
    assert html_out.read_text().startswith("<!DOCTYPE html>")
    md = md_out.read_text()
    assert "system prompt changed without a version bump" in md and "PP-LOCK" in md
    assert main(["report", str(rec)]) == 0  # Markdown on stdout by default
    assert capsys.readouterr().out.startswith("## prefixplan report")
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert main(["report", str(_write(tmp_path, "bad.json", "{nope"))]) == 2
    assert "not JSON" in capsys.readouterr().err
    assert main(["report", str(_write(tmp_path, "other.json", {"hello": 1}))]) == 2
    assert main(["report", str(_write(tmp_path, "new.json", {**analyzed, "schema_version": 99}))]) == 2
    assert "newer" in capsys.readouterr().err
    assert main(["report", str(rec), "--html", "-", "--markdown", "-"]) == 2


def test_analyze_writes_reports(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps(_chat(f"question {i}", f"u{i % 2}")) for i in range(4)) + "\n")
    html_out, md_out = tmp_path / "a.html", tmp_path / "a.md"
    assert (
        main(
            [
                "analyze",
                str(log),
                "--no-store",
                "-q",
                "--no-rag-whatif",
                "--html",
                str(html_out),
                "--markdown",
                str(md_out),
            ]
        )
        == 0
    )
    assert embedded(parse(html_out.read_text()))["summary"]["requests"] == 4
    assert "| requests | 4 |" in md_out.read_text()


def test_many_candidates_keep_the_page_bounded(analyzed):
    from prefixplan.report.html import ICICLE_MAX

    c = next(c for c in analyzed["candidates"] if not c["withheld"])
    many = [{**c, "rank": i + 1, "parent": i // 2 if i else None} for i in range(2 * ICICLE_MAX)]
    doc = parse(render_html({**analyzed, "candidates": many}))
    drawn = [a for t, a in doc.elements if t == "g" and a.get("class") == "pp-ice"]
    assert 1 < len(drawn) <= ICICLE_MAX + 1 and all(int(a["data-rank"] or 0) <= ICICLE_MAX for a in drawn)
    assert (
        len([a for t, a in doc.elements if t == "tr" and a.get("data-rank")]) == 2 * ICICLE_MAX
    )  # the table keeps all
    boxes = [a for t, a in doc.elements if t == "tr" and a.get("data-box-rank")]
    assert len(boxes) == len(drawn) - 1  # the nesting table lists every drawn box but the root
