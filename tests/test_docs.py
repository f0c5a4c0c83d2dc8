"""The docs harness: every command example in README.md and docs/*.md runs and prints what it shows.

Convention (also stated at the top of docs/README.md):

* A fenced block opened with ```console holds examples. A line starting with ``$ `` is a
  command, run with bash from the repository root (a trailing ``\\`` continues it on the next
  line). ``prefixplan`` and ``python`` resolve to the installed entry point and the test's
  interpreter; ``PREFIXPLAN_DB`` points at a temp file; ``COLUMNS=160``.
* The lines after a command, up to the next ``$ `` line, are its expected output: every
  non-empty line other than ``...`` must appear, whitespace-normalised, inside a line of the
  real output (stdout and stderr together), in the same order.
* A line ``# exit N`` right after the command sets the expected exit code (default 0).
* A ```python block is run with the test's interpreter in the page's scratch folder; an
  ```output block right after it lists lines its output must contain. Expected lines match
  whole words and numbers ("requests 400" does not match "requests 4000").
* Commands that need a live server or the network go in a ```console-live block (not run
  here). A block whose output needs a setup the harness cannot make is preceded by the line
  ``<!-- docs-test: skip REASON -->`` naming where it is tested instead.

The commands of one page run in order in one scratch folder that links the repository's
top-level entries, so a page can write ``analysis.json`` and read it back without touching
the checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
SKIP = re.compile(r"^<!--\s*docs-test:\s*skip\b\s*(.*?)\s*-->\s*$")
EXIT = re.compile(r"^#\s*exit\s+(\d+)\s*$")


@dataclass
class Example:
    """One ``$ `` command of a docs page, with its expected output lines and exit code."""

    doc: str
    line: int
    command: str
    expected: list[str] = field(default_factory=list)
    exit_code: int = 0


@dataclass
class Page:
    examples: list[Example]
    skipped: list[tuple[int, str]]  # (line, why) of blocks not run here


def doc_pages() -> list[Path]:
    pages = [ROOT / "README.md"] if (ROOT / "README.md").is_file() else []
    return pages + sorted((ROOT / "docs").glob("*.md"))


def parse_page(text: str, doc: str = "<doc>") -> Page:
    """Split a Markdown page into its console examples (see the module docstring)."""
    examples: list[Example] = []
    skipped: list[tuple[int, str]] = []
    lines = text.splitlines()
    i = 0
    prev = ""
    last_python: Example | None = None
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                prev = lines[i].strip()
            i += 1
            continue
        marker, lang, start = m.group(2), m.group(3), i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(marker):
            body.append(lines[i])
            i += 1
        i += 1
        skip = SKIP.match(prev)
        prev = ""
        if lang == "console-live":
            skipped.append((start + 1, "console-live: needs a live server or the network"))
            continue
        if lang == "output" and last_python is not None:
            last_python.expected.extend(x for x in body if x.strip() and x.strip() != "...")
            last_python = None
            continue
        last_python = None
        if lang == "python" and not skip:
            code = "\n".join(body)
            last_python = Example(doc, start + 2, f"python - <<'PYDOC'\n{code}\nPYDOC")
            examples.append(last_python)
            continue
        if lang != "console":
            continue
        if skip:
            skipped.append((start + 1, skip.group(1) or "marked skip"))
            continue
        current: Example | None = None
        j = 0
        while j < len(body):
            line = body[j]
            if line.startswith("$ "):
                cmd, first = line[2:], start + 2 + j
                while cmd.endswith("\\") and j + 1 < len(body):
                    j += 1
                    cmd = cmd + "\n" + body[j]  # bash reads backslash-newline as a continuation
                current = Example(doc, first, cmd)
                examples.append(current)
                if j + 1 < len(body) and EXIT.match(body[j + 1].strip()):
                    j += 1
                    current.exit_code = int(EXIT.match(body[j].strip()).group(1))
            elif current is not None and line.strip() and line.strip() != "...":
                current.expected.append(line)
            elif current is None and line.strip():
                raise AssertionError(f"{doc}:{start + 2 + j}: output before any '$ ' command in a console block")
            j += 1
    return Page(examples, skipped)


def _norm(s: str) -> str:
    return " ".join(s.split())


def _find_whole(text: str, want: str, pos: int) -> int:
    """First match of ``want`` at or after ``pos`` that does not cut a word or number in two
    ("requests 400" does not match "requests 4000")."""
    k = text.find(want, pos)
    while k >= 0:
        before = text[k - 1] if k > 0 else " "
        after = text[k + len(want)] if k + len(want) < len(text) else " "
        ok_before = not (want[:1].isalnum() and before.isalnum())
        ok_after = not (want[-1:].isalnum() and after.isalnum())
        if ok_before and ok_after:
            return k
        k = text.find(want, k + 1)
    return -1


def missing_lines(expected: list[str], output: str) -> list[str]:
    """Expected lines not found in ``output``: each, whitespace-normalised, must occur within one
    output line, after the previous expected line's match (later on the same line counts)."""
    text = "\n".join(_norm(x) for x in output.splitlines())
    pos, missing = 0, []
    for want in (_norm(x) for x in expected):
        k = _find_whole(text, want, pos)
        if k < 0:
            missing.append(want)
        else:
            pos = k + len(want)
    return missing


def scratch_checkout(where: Path) -> Path:
    """A folder whose top-level entries link to the repository's, so commands see the repo but write here."""
    where.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name in (".pytest_cache", "test-artifacts") or entry.name.endswith(".db"):
            continue
        (where / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return where


def harness_env(tmp: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The examples' environment, from ``environ`` (default: a copy of this process's). Pages run
    in threads: they get a copy taken in the main thread, where pytest changes os.environ
    (iterating it while it changes raised KeyError)."""
    bindir = Path(sys.executable).parent
    exe = shutil.which("prefixplan", path=str(bindir)) or shutil.which("prefixplan")
    assert exe, "the prefixplan entry point is not installed (pip install -e .)"
    env = {
        k: v
        for k, v in (dict(os.environ) if environ is None else environ).items()
        if not k.startswith("PREFIXPLAN_") or k in ("PREFIXPLAN_QWEN3_DIR", "PREFIXPLAN_TOKENIZER_DIR")
    }
    env.update(
        PATH=os.pathsep.join(dict.fromkeys([str(bindir), str(Path(exe).parent), env.get("PATH", "")])),
        PREFIXPLAN_DB=str(tmp / "docs.db"),
        COLUMNS="160",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        NO_COLOR="1",
        TERM="dumb",
    )
    return env


PAGES = doc_pages()


def run_page(doc: Path, tmp: Path, environ: dict[str, str] | None = None) -> list[str]:
    """Run one page's examples in order; return the failures (empty when the page is right)."""
    page = parse_page(doc.read_text(encoding="utf-8"), doc.relative_to(ROOT).as_posix())
    cwd = scratch_checkout(tmp / "repo")
    env = harness_env(tmp, environ)
    failures = []
    for ex in page.examples:
        proc = subprocess.run(
            ["bash", "-c", ex.command],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=600,
            check=False,
        )
        missing = missing_lines(ex.expected, proc.stdout)
        if proc.returncode != ex.exit_code or missing:
            failures.append(
                f"{ex.doc}:{ex.line}: $ {ex.command}\n  exit {proc.returncode} (documented {ex.exit_code})"
                + "".join(f"\n  missing: {m}" for m in missing)
                + "\n  --- output (tail) ---\n"
                + "\n".join(proc.stdout.splitlines()[-25:])
            )
    return failures


@pytest.fixture(scope="module")
def page_results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Future]:
    """Start every selected page with examples at once (pages are independent; each runs in order)."""
    selected = {
        item.callspec.params["doc"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_doc_examples_run" and hasattr(item, "callspec")
    }
    pages = [p for p in PAGES if p in selected and parse_page(p.read_text(encoding="utf-8")).examples]
    pool = ThreadPoolExecutor(max_workers=max(1, min(len(pages), os.cpu_count() or 2)))
    request.addfinalizer(pool.shutdown)
    environ = dict(os.environ)  # here, in the thread where pytest changes it
    return {p: pool.submit(run_page, p, tmp_path_factory.mktemp("docs"), environ) for p in pages}


@pytest.mark.parametrize(
    "doc",
    # README's examples (the main job) run in every stage; the other pages' only where heavy tests do.
    [pytest.param(p, marks=() if p.name == "README.md" and p.parent == ROOT else pytest.mark.heavy) for p in PAGES],
    ids=[p.relative_to(ROOT).as_posix() for p in PAGES],
)
def test_doc_examples_run(doc: Path, page_results: dict[Path, Future]) -> None:
    if doc not in page_results:
        pytest.skip(f"{doc.relative_to(ROOT)}: no console examples")
    failures = page_results[doc].result()
    assert not failures, "\n\n".join(failures)


def test_every_cli_command_is_documented() -> None:
    import typer

    from prefixplan.cli.app import build_app

    commands = sorted(typer.main.get_command(build_app()).commands)
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    undocumented = [c for c in commands if not re.search(rf"\bprefixplan\s+{re.escape(c)}\b", text)]
    assert not undocumented, f"commands no docs page mentions as `prefixplan <command>`: {undocumented}"


def test_docs_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    assert "```console" in index and "# exit N" in index, "the index states the example convention"
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name != "README.md":
            assert f"({page.name})" in index, f"docs/README.md does not link {page.name}"


PARSE_SAMPLE = """
Intro.

```console
$ prefixplan report a.json \\
    --markdown -
## prefixplan report
...
| requests | 400 |
$ prefixplan report missing.json
# exit 2
error: analysis record missing.json: no such file
```

```console-live
$ prefixplan warm --endpoint http://127.0.0.1:8000
```

<!-- docs-test: skip tested in tests/test_check_docs.py -->
```console
$ prefixplan check
error content-changed
```

```bash
prefixplan lock
```
"""


def test_parser_follows_the_convention() -> None:
    page = parse_page(PARSE_SAMPLE, "sample.md")
    assert [(e.command, e.expected, e.exit_code) for e in page.examples] == [
        ("prefixplan report a.json \\\n    --markdown -", ["## prefixplan report", "| requests | 400 |"], 0),
        ("prefixplan report missing.json", ["error: analysis record missing.json: no such file"], 2),
    ]
    assert page.examples[1].line == 10
    assert [why for _, why in page.skipped] == [
        "console-live: needs a live server or the network",
        "tested in tests/test_check_docs.py",
    ]
    with pytest.raises(AssertionError, match="output before any"):
        parse_page("```console\nhello\n```\n")


def test_output_matching_is_ordered_and_whitespace_normalised() -> None:
    out = "requests        400\nprompt tokens   1,817,123\n│ dynamic-system │ datetime │\n"
    assert missing_lines(["requests 400", "dynamic-system │ datetime"], out) == []
    assert missing_lines(["prompt tokens 1,817,123", "requests 400"], out) == ["requests 400"]  # order matters
    assert missing_lines(["requests 401"], out) == ["requests 401"]
    assert missing_lines(["error:", "missing.jsonl"], "error: log file not found: missing.jsonl") == []
    assert missing_lines(["missing.jsonl", "error:"], "error: log file not found: missing.jsonl") == ["error:"]
    assert missing_lines(["tokens 400"], "tokens\n400") == ["tokens 400"]  # never across lines


def test_output_matching_takes_whole_words_and_numbers() -> None:
    assert missing_lines(["requests 400"], "requests 4000") == ["requests 400"]
    assert missing_lines(["requests 400"], "subrequests 400") == ["requests 400"]
    assert missing_lines(["requests 400"], "requests 4000 then requests 400") == []
    assert missing_lines(["hit rate 54.2%"], "hit rate 54.2% (unbounded)") == []
    assert missing_lines(["…"], "a…b") == []  # expectations that do not end in a word char match inside words


def test_python_blocks_run_and_check_their_output() -> None:
    page = parse_page("```python\nprint(1 + 1)\n```\n\n```output\n2\n```\n\n```python\nx = 1\n```\n")
    first, second = page.examples
    assert "print(1 + 1)" in first.command and first.command.startswith("python - <<'PYDOC'")
    assert first.expected == ["2"] and second.expected == []
