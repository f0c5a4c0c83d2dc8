"""Render workers and the command line load tokenizers without importing a model framework, even
where one is installed: a stand-in ``torch`` package on the path records every process that
imports it (and fails the import), and transformers is shown to import it when nothing hides it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tiny_tokenizer(folder: Path) -> Path:
    """A small byte-level BPE tokenizer with a chat template, saved as an ``hf:`` folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<|im_end|>": 1}
    for c in sorted(set("abcdefghijklmnopqrstuvwxyz0123456789<>|:. \n") | {"Ġ", "Ċ"}):
        vocab.setdefault(c, len(vocab))
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", unk_token="<unk>")
    fast.chat_template = (
        "{% for m in messages %}{{ '<' + m['role'] + '>' + m['content'] + eos_token }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<assistant>' }}{% endif %}"
    )
    fast.save_pretrained(folder)
    return folder


def _stand_in(folder: Path) -> Path:
    """A ``torch`` package that transformers takes for an installed one (it has the metadata of
    a release newer than any transformers asks for) and whose import is recorded, then fails."""
    pkg = folder / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "import os\n"
        "with open(os.environ['STANDIN_MARKS'], 'a') as fh:\n"
        "    fh.write(f'{os.getpid()}\\n')\n"
        "raise RuntimeError('the stand-in torch was imported')\n"
    )
    meta = folder / "torch-99.0.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 99.0.0\n")
    (meta / "RECORD").write_text("")
    return folder


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    marks = tmp_path / "marks"
    marks.write_text("")
    path = os.pathsep.join([str(_stand_in(tmp_path / "standin")), str(ROOT)])
    return {**os.environ, "PYTHONPATH": path, "STANDIN_MARKS": str(marks), "HF_HUB_OFFLINE": "1"}


def _marks(env: dict[str, str]) -> list[str]:
    return Path(env["STANDIN_MARKS"]).read_text().split()


def test_transformers_imports_the_stand_in_when_nothing_hides_it(tmp_path: Path, env: dict[str, str]) -> None:
    """The control: the test below can fail (transformers finds the stand-in and imports it)."""
    tok = _tiny_tokenizer(tmp_path / "tok")
    code = f"from transformers import AutoTokenizer\nAutoTokenizer.from_pretrained({str(tok)!r})\n"
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=300)
    assert _marks(env), "transformers did not import the stand-in torch: the test below would prove nothing"


def test_render_workers_and_the_command_line_never_import_a_model_framework(
    tmp_path: Path, env: dict[str, str]
) -> None:
    tok = _tiny_tokenizer(tmp_path / "tok")
    log = tmp_path / "log.jsonl"
    system = {"role": "system", "content": "you are a terse assistant. answer in one line. " * 8}
    lines = [{"model": "m", "messages": [system, {"role": "user", "content": f"question {i}"}]} for i in range(400)]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    records = {}
    for workers in ("1", "2"):
        out = tmp_path / f"r{workers}.json"
        done = subprocess.run(
            [sys.executable, "-m", "prefixplan", "analyze", str(log), "--tokenizer", f"hf:{tok}"]
            + ["--workers", workers, "--no-store", "-q", "--json", str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        records[workers] = json.loads(out.read_text())
    assert _marks(env) == []  # no process of the command, parent or worker, imported it
    assert records["1"]["summary"]["requests"] == records["2"]["summary"]["requests"] == 400
    assert records["1"]["candidates"] == records["2"]["candidates"]


def test_a_framework_already_imported_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from prefixplan.render.frameworks import MODEL_FRAMEWORKS, hide_model_frameworks

    modules = dict(sys.modules)
    for name in MODEL_FRAMEWORKS:
        modules.pop(name, None)
    present = types.ModuleType("torch")
    modules["torch"] = present
    monkeypatch.setattr(sys, "modules", modules)
    assert hide_model_frameworks() == tuple(n for n in MODEL_FRAMEWORKS if n != "torch")
    assert sys.modules["torch"] is present and all(sys.modules[n] is None for n in MODEL_FRAMEWORKS[1:])
