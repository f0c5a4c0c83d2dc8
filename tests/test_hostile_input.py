"""Hostile files: recipe parts outside the repository, YAML alias bombs, credentials in fleet files.

Each case is refused with a message naming the field, and nothing it would have read is printed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from prefixplan.cli.app import main
from prefixplan.core import yamlsafe
from prefixplan.errors import InputError, RecipeError
from prefixplan.keys.recipes import load_recipes
from prefixplan.warming.source import load_endpoints

ROOT = Path(__file__).resolve().parent.parent

BOMB = (
    'a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]\n'
    "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
    "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
    "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
    "h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
    "i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n"
)


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository (it has .git) with the bundled recipes; a secret file sits next to it, outside."""
    r = tmp_path / "repo"
    (r / ".git").mkdir(parents=True)
    shutil.copytree(ROOT / "recipes", r / "recipes")
    (tmp_path / "secret.env").write_text("TOKEN=hunter2-outside-the-repo\n")
    monkeypatch.chdir(r)
    return r


def _recipe(repo: Path, field: str) -> None:
    (repo / "recipes" / "evil.yaml").write_text(f"prefixes:\n  - name: evil\n    version: 1\n{field}\n")


@pytest.mark.parametrize(
    "field, named",
    [
        ("    system: {file: ../../secret.env}", "prefixes[0].system.file: ../../secret.env is outside"),
        ("    system: {file: /proc/self/environ}", "prefixes[0].system.file: /proc/self/environ is outside"),
        ("    documents: ['../../*.env']", "prefixes[0].documents[0].glob: ../../secret.env is outside"),
        ("    tools: [../../secret.env]", "prefixes[0].tools[0]: ../../secret.env is outside"),
        ("    system: {file: parts/link.md}", "prefixes[0].system.file: parts/link.md is outside"),
    ],
)
def test_recipe_parts_are_confined_to_the_repository(repo: Path, field: str, named: str) -> None:
    os.symlink(repo.parent / "secret.env", repo / "recipes" / "parts" / "link.md")
    _recipe(repo, field)
    with pytest.raises(RecipeError) as exc:
        load_recipes("recipes")
    assert named in str(exc.value) and "hunter2" not in str(exc.value)


def test_parts_anywhere_inside_the_repository_are_accepted(repo: Path) -> None:
    (repo / "prompts").mkdir()
    (repo / "prompts" / "sys.md").write_text("You are helpful.\n")
    os.symlink(repo / "prompts" / "sys.md", repo / "recipes" / "parts" / "inside.md")
    _recipe(
        repo,
        "    system: {file: ../prompts/sys.md}\n  - name: linked\n    version: 1\n    system: {file: parts/inside.md}",
    )
    got = {r.name: r for r in load_recipes("recipes")}
    assert got["evil"].parts[0].data == got["linked"].parts[0].data == b"You are helpful.\n"


def test_check_github_annotations_never_carry_what_a_hostile_recipe_points_at(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANTED_TOKEN", "tok_9f8e7d6c5b4a39281706")
    _recipe(repo, "    system: {file: /proc/self/environ}")
    assert main(["check", "--output-format", "github"]) == 2
    out = capsys.readouterr()
    assert "is outside" in out.out + out.err
    assert "tok_9f8e7d6c5b4a39281706" not in out.out + out.err


@pytest.mark.parametrize("where", ["recipe", "tool", "fleet"])
def test_yaml_alias_bombs_are_refused_at_once(repo: Path, where: str) -> None:
    if where == "recipe":
        (repo / "recipes" / "bomb.yaml").write_text(BOMB + "prefixes:\n  - name: b\n    version: 1\n    system: x\n")
        with pytest.raises(RecipeError, match="aliases"):
            load_recipes("recipes")
    elif where == "tool":
        (repo / "recipes" / "parts" / "bomb.yaml").write_text(BOMB)
        _recipe(repo, "    tools: [parts/bomb.yaml]")
        with pytest.raises(RecipeError, match=r"prefixes\[0\]\.tools\[0\].*aliases"):
            load_recipes("recipes")
    else:
        fleet = repo / "fleet.yaml"
        fleet.write_text(BOMB + "replicas:\n  - url: http://h:1\n    headers: {X-Trace: *i}\n")
        with pytest.raises(InputError, match="aliases"):
            load_endpoints(fleet)


@pytest.mark.parametrize("libyaml", [True, False])
def test_yaml_depth_aliases_and_plain_documents(monkeypatch: pytest.MonkeyPatch, libyaml: bool) -> None:
    import yaml

    monkeypatch.setattr(yaml, "__with_libyaml__", libyaml and yaml.__with_libyaml__)
    assert yamlsafe.load("a: [1, {b: c}]\n") == {"a": [1, {"b": "c"}]}
    assert yamlsafe.compose("a:\n  b: 1\n").value[0][1].start_mark.line == 1
    with pytest.raises(yaml.YAMLError, match="nested deeper"):
        yamlsafe.load("[" * 200 + "]" * 200)
    with pytest.raises(yaml.YAMLError, match=r"(?s)aliases \(\*a\).*line 2"):
        yamlsafe.load(BOMB + "j: *i\n")


@pytest.mark.parametrize(
    "replica, named",
    [
        ("url: http://alice:s3cret@gpu-a:8000", "replicas[0].url: endpoint URL http://gpu-a:8000 carries credentials"),
        ("{url: 'http://gpu-a:8000', headers: {X-Api-Key: s3cret}}", "headers.X-Api-Key"),
        ("{url: 'http://gpu-a:8000', headers: {Cookie: session=s3cret}}", "headers.Cookie"),
        ("{url: 'http://gpu-a:8000', token: s3cret}", "api_key_env"),
    ],
)
def test_fleet_files_refuse_credentials_and_name_the_env_var_way(tmp_path: Path, replica: str, named: str) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"replicas:\n  - {replica}\n")
    with pytest.raises(InputError) as exc:
        load_endpoints(fleet)
    text = f"{exc.value} {getattr(exc.value, 'hint', '')}"
    assert named in text and "s3cret" not in text
    assert "api_key_env" in text or "environment" in text


def test_fleet_file_plain_headers_pass(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("replicas:\n  - {url: 'http://gpu-a:8000', headers: {X-Tenant: blue}}\n")
    (ep,) = load_endpoints(fleet)
    assert dict(ep.headers) == {"X-Tenant": "blue"}


def test_an_output_that_cannot_be_written_does_not_cost_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "log.jsonl"
    system = "You are the support assistant. " * 30
    log.write_text(
        "".join(
            json.dumps(
                {
                    "model": "m",
                    "user": f"u{i}",
                    "messages": [{"role": "system", "content": system}, {"role": "user", "content": f"q{i}"}],
                }
            )
            + "\n"
            for i in range(6)
        )
    )
    (tmp_path / "taken").mkdir()  # --html names a folder: cannot be written
    args = ["--html", str(tmp_path / "taken"), "--markdown", str(tmp_path / "r.md")]
    code = main(["analyze", str(log), "--no-store", "--json", str(tmp_path / "a.json"), *args, "-q"])
    err = capsys.readouterr().err
    assert code == 2 and f"cannot write {tmp_path / 'taken'}: it is a folder" in err
    assert (tmp_path / "a.json").is_file() and (tmp_path / "r.md").read_text().startswith("#")
    assert "written anyway:" in err and "r.md (markdown report)" in err and "a.json (analysis record)" in err
    # the report command too
    (tmp_path / "r.md").unlink()
    code = main(["report", str(tmp_path / "a.json"), *args])
    err = capsys.readouterr().err
    assert code == 2 and "it is a folder" in err and (tmp_path / "r.md").is_file()
