"""Recipe loading and strict validation with field-path errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixplan.errors import RecipeError
from prefixplan.keys import content_hash
from prefixplan.keys.chunking import chunk_text
from prefixplan.keys.recipe_parts import parse_duration
from prefixplan.keys.recipes import load_recipes

ROOT = Path(__file__).resolve().parent.parent


def test_bundled_examples_load() -> None:
    recipes = {r.name: r for r in load_recipes(ROOT / "recipes")}
    assert set(recipes) == {"relay-agent", "nimbus-manual-rag", "support-bot"}
    agent = recipes["relay-agent"]
    assert [p.kind for p in agent.parts] == ["system"] + ["tool"] * 5
    assert agent.parts[5].source == "parts/agent/tools/page_oncall.yaml"
    assert agent.parts[0].data == (ROOT / "recipes/parts/agent/system.md").read_bytes()
    assert agent.pin and agent.retain == 7 * 86400 and str(agent.key) == "relay-agent@v1"
    rag = recipes["nimbus-manual-rag"]
    docs = [p for p in rag.parts if p.kind == "document"]
    assert len(docs) > 3 and all(len(p.data.decode()) <= 1500 for p in docs)
    # chunks are exact slices: per file they concatenate back to the file
    for f in sorted((ROOT / "recipes/parts/manual").glob("*.md")):
        rel = f"parts/manual/{f.name}"
        assert b"".join(p.data for p in docs if p.source.startswith(rel + "#")) == f.read_bytes()
    assert rag.retain == 14 * 86400 and rag.parts[0].source == "inline"
    support = recipes["support-bot"]
    assert support.content_hash == content_hash([(p.kind, p.data) for p in support.parts])
    assert str(support.key) == "support-bot@v3"


def _write(tmp: Path, text: str, name: str = "agent.yaml") -> Path:
    d = tmp / "recipes"
    d.mkdir(exist_ok=True)
    (d / name).write_text(text)
    return d


@pytest.fixture()
def parts(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "recipes" / "parts", tmp_path / "recipes" / "parts")
    return tmp_path


BASE = """prefixes:
  - name: agent
    version: 1
    system: {file: parts/agent/system.md}
    tools:
      - parts/agent/tools/search_runbooks.json
      - parts/agent/tools/query_metrics.json
      - %s
"""


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            BASE % "parts/agent/tools/missing.json",
            "recipes/agent.yaml: prefixes[0].tools[2]: file not found: parts/agent/tools/missing.json",
        ),
        (
            BASE % "{file: parts/agent/tools/restart_service.json, extra: 1}",
            "recipes/agent.yaml: prefixes[0].tools[2].extra: unknown field",
        ),
        (
            BASE.replace("version: 1", "version: 0") % "parts/agent/tools/restart_service.json",
            "recipes/agent.yaml: prefixes[0].version: required: an integer from 1 to 999999999 (a key is name@vN, N of up to 9 digits)",
        ),
        (
            BASE.replace("version: 1", "version: 1\n    colour: red") % "parts/agent/tools/restart_service.json",
            "recipes/agent.yaml: prefixes[0].colour: unknown field",
        ),
        (
            BASE.replace("version: 1", "version: 1\n    retain: soon") % "parts/agent/tools/restart_service.json",
            "recipes/agent.yaml: prefixes[0].retain: invalid duration 'soon'",
        ),
        (
            BASE.replace("version: 1", "version: 1\n    render: html") % "parts/agent/tools/restart_service.json",
            "recipes/agent.yaml: prefixes[0].render: expected one of chat, completion",
        ),
        (BASE % "{glob: 'parts/nothing/*.json'}", "recipes/agent.yaml: prefixes[0].tools[2].glob: unknown field"),
        (
            "prefixes:\n  - name: a\n    version: 1\n    documents: [{glob: 'parts/none/*.md'}]\n",
            "recipes/agent.yaml: prefixes[0].documents[0].glob: no files match parts/none/*.md",
        ),
        (
            "prefixes:\n  - name: a\n    version: 1\n    documents: [{file: parts/manual/02-setup.md, chunk: pages}]\n",
            "recipes/agent.yaml: prefixes[0].documents[0].chunk: unknown chunk mode 'pages'",
        ),
        ("prefixes:\n  - name: a\n    version: 1\n", "recipes/agent.yaml: prefixes[0]: a prefix needs at least one of"),
        (
            "prefixes:\n  - name: a\n    version: 1\n    version: 2\n    system: x\n",
            "recipes/agent.yaml: prefixes[0].version: duplicate key",
        ),
        ("prefix: []\n", "recipes/agent.yaml: prefix: unknown field"),
        ("prefixes: [\n", "recipes/agent.yaml: invalid YAML"),
        (
            "prefixes:\n  - name: 'has space'\n    version: 1\n    system: x\n",
            "recipes/agent.yaml: prefixes[0].name: required",
        ),
    ],
)
def test_field_path_errors(parts: Path, monkeypatch: pytest.MonkeyPatch, body: str, expected: str) -> None:
    monkeypatch.chdir(parts)
    _write(parts, body)
    with pytest.raises(RecipeError) as exc:
        load_recipes("recipes")
    assert expected in str(exc.value), str(exc.value)
    problems = exc.value.errors  # type: ignore[attr-defined]
    assert problems and all(p.line >= 1 for p in problems)


def test_error_line_numbers_and_all_errors_reported(parts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(parts)
    _write(parts, BASE.replace("version: 1", "version: -3") % "parts/agent/tools/missing.json")
    with pytest.raises(RecipeError) as exc:
        load_recipes("recipes")
    got = {(p.field, p.line) for p in exc.value.errors}  # type: ignore[attr-defined]
    assert got == {("prefixes[0].version", 3), ("prefixes[0].tools[2]", 8)}


def test_duplicate_names_across_files(parts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(parts)
    _write(parts, "prefixes:\n  - name: a\n    version: 1\n    system: x\n", "one.yaml")
    _write(parts, "prefixes:\n  - name: a\n    version: 2\n    system: y\n", "two.yaml")
    with pytest.raises(
        RecipeError, match=r"recipes/two.yaml: prefixes\[0\].name: duplicate name 'a' \(also recipes/one.yaml"
    ):
        load_recipes("recipes")


def test_inline_parts_and_yaml_tool(parts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(parts)
    _write(
        parts,
        """prefixes:
  - name: inline
    version: 2
    retain: 36h
    system: "Be brief."
    tools:
      - inline: {type: function, function: {name: b_tool, parameters: {z: 1, a: 2}}}
      - parts/agent/tools/page_oncall.yaml
""",
    )
    (r,) = load_recipes("recipes")
    assert r.parts[0].data == b"Be brief."
    # inline tools are compact JSON in the key order written
    assert r.parts[1].data == b'{"type":"function","function":{"name":"b_tool","parameters":{"z":1,"a":2}}}'
    assert r.parts[2].data.startswith(b"# Tool schema written in YAML")
    assert r.retain == 36 * 3600


def test_durations() -> None:
    assert [parse_duration(x) for x in ("7d", "12h", "90m", "3600s", "2w", 60, "0")] == [
        604800,
        43200,
        5400,
        3600,
        1209600,
        60,
        0,
    ]
    for bad in ("-1d", "1y", True, -5, 1.5):
        with pytest.raises(ValueError):
            parse_duration(bad)


TEXT = st.text(alphabet=st.sampled_from(list("ab #\n`~x")), max_size=300)


@settings(max_examples=300, deadline=None)
@given(TEXT, st.sampled_from(["none", "blank-lines", "headings"]), st.one_of(st.none(), st.integers(1, 40)))
def test_chunks_are_exact_slices(text: str, by: str, max_chars: int | None) -> None:
    chunks = chunk_text(text, by, max_chars)
    assert "".join(c for _, c in chunks) == text
    assert [s for s, _ in chunks] == [sum(len(c) for _, c in chunks[:i]) for i in range(len(chunks))]
    if max_chars:
        assert all(len(c) <= max_chars for _, c in chunks)


def test_chunk_modes() -> None:
    md = "# A\npara one\n\npara two\n```\n# not a heading\n```\n## B\nlast\n"
    assert [c for _, c in chunk_text(md, "headings")] == [
        "# A\npara one\n\npara two\n```\n# not a heading\n```\n",
        "## B\nlast\n",
    ]
    assert [c for _, c in chunk_text("a\n\n\nb\nc\n\nd", "blank-lines")] == ["a\n\n\n", "b\nc\n\n", "d"]


def test_emit_recipe_roundtrip(tmp_path: Path) -> None:
    from prefixplan.keys.emit import emit_recipe

    system = "You are the Acme support assistant.\r\nKeep answers short.  \n"
    tools = ['{"type": "function", "function": {"name": "lookup order"}}', b'{"name":"refund"}']
    path = emit_recipe(
        tmp_path / "out",
        "support-bot",
        version=4,
        system_text=system,
        tools=tools,
        documents=["chunk one\n"],
        model="acme-chat",
        retain=3 * 86400,
    )
    (r,) = load_recipes(tmp_path / "out")
    assert path == tmp_path / "out" / "support-bot.yaml"
    assert (str(r.key), r.model, r.retain) == ("support-bot@v4", "acme-chat", 3 * 86400)
    assert [p.source for p in r.parts] == [
        "parts/support-bot/system.txt",
        "parts/support-bot/tools/00-lookup-order.json",
        "parts/support-bot/tools/01-refund.json",
        "parts/support-bot/documents/00.txt",
    ]
    expected = content_hash(
        [
            ("system", system.encode()),
            ("tool", tools[0].encode()),
            ("tool", tools[1]),  # type: ignore[union-attr]
            ("document", b"chunk one\n"),
        ]
    )
    assert r.content_hash == expected
    with pytest.raises(RecipeError):
        emit_recipe(tmp_path / "out", "bad name", system_text="x")
