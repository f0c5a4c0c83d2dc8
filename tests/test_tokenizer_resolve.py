"""Tokenizers named the way engines name them, and saying when the tokenizer is not the log model's.

- the family table: model names -> families -> specs (``--tokenizer auto``), unknown -> an error
  listing the families;
- ``--tokenizer auto`` on a log naming three model families (Qwen3, Llama 3, DeepSeek-V3) picks each
  one's real tokenizer (the files scripts/fetch_tokenizers.py fetches);
- ``hf:ORG/NAME`` from a Hugging Face cache laid out as huggingface_hub lays it out, the offline
  error naming the cache and HF_HUB_OFFLINE, a download hook when online;
- ``tiktoken:NAME`` from tiktoken's own cache (file named by the sha1 of the download URL);
- issue 14 item 4: a log of gpt-4o requests analysed with the default tokenizer -- the first line
  of the console output warns, the record says ``tokenizer.matches_log_model: false`` and names the
  ``--tokenizer`` to use; old records without the field still load.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from prefixplan.analysis.record import AnalysisRecord, TokenizerInfo
from prefixplan.cli.app import main
from prefixplan.errors import TokenizerError, UsageError
from prefixplan.render.resolve import (
    auto_spec,
    cached_snapshot,
    family_of_model,
    family_of_spec,
    resolve_hf,
    suggestion,
)

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "logs"
FETCHED = ROOT / ".cache" / "tokenizers"


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("Qwen/Qwen3-8B", "qwen3"),
        ("tiny-qwen3", "qwen3"),
        ("qwen3-30b-a3b", "qwen3"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama3"),
        ("meta-llama/Llama-3.1-70B-Instruct", "llama3.1"),
        ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
        ("google/gemma-3-27b-it", "gemma3"),
        ("openai/gpt-oss-20b", "gpt-oss"),
        ("mistralai/Mistral-Nemo-Instruct-2407", "mistral-nemo"),
        ("gpt-4o", "openai-o200k"),
        ("gpt-4o-mini", "openai-o200k"),
        ("o3-mini", "openai-o200k"),
        ("gpt-4-turbo", "openai-cl100k"),
        ("gpt-3.5-turbo", "openai-cl100k"),
        ("claude-sonnet-4", None),
        ("acme-chat", None),
    ],
)
def test_family_table(model: str, family: str | None) -> None:
    found = family_of_model(model)
    assert (found.name if found else None) == family


def test_family_of_a_spec_and_the_suggestion() -> None:
    assert family_of_spec("mistral:nemo").name == "mistral-nemo"
    assert family_of_spec("tiktoken:o200k_base").name == "openai-o200k"
    assert family_of_spec("hf:Qwen/Qwen3-8B").name == "qwen3"
    assert family_of_spec("hf:.cache/tokenizers/llama3").name == "llama3"
    assert family_of_spec("vllm:http://x:8000", served_model="tiny-qwen3").name == "qwen3"
    assert family_of_spec("hf:/models/custom") is None
    assert suggestion(["gpt-4o"]) == "--tokenizer tiktoken:o200k_base"
    assert suggestion(["Qwen/Qwen3-8B", "deepseek-ai/DeepSeek-V3"]).startswith("--tokenizer auto (")
    assert suggestion(["acme"]) is None


def test_auto_on_an_unknown_model_lists_the_families() -> None:
    with pytest.raises(UsageError) as err:
        auto_spec("acme-chat")
    assert "no known tokenizer for model 'acme-chat'" in str(err.value)
    assert "qwen3 (hf:Qwen/Qwen3-8B)" in err.value.hint and "--tokenizer-map" in err.value.hint
    with pytest.raises(UsageError) as err:
        auto_spec("claude-sonnet-4")
    assert "Anthropic does not publish" in str(err.value)


def test_auto_unknown_model_in_a_log_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"model": "acme-chat", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    code = main(["analyze", str(log), "-t", "auto", "--no-store", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "no known tokenizer for model 'acme-chat'" in err and "hint:" in err


def _need(*names: str) -> None:
    missing = [n for n in names if not (FETCHED / n / "tokenizer.json").is_file()]
    if missing:
        pytest.skip(f"tokenizers not fetched: {missing} (python scripts/fetch_tokenizers.py {' '.join(missing)})")


def test_auto_picks_each_of_three_families_real_tokenizer(tmp_path: Path, monkeypatch) -> None:
    """The LiteLLM proxy log names Qwen/Qwen3-8B, meta-llama/Meta-Llama-3-8B-Instruct and
    deepseek-ai/DeepSeek-V3; with no hub cache, auto uses each family's fetched tokenizer and the
    token ids are those of that tokenizer's own chat template."""
    _need("qwen3", "llama3", "deepseek_v3")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.chdir(ROOT)
    from oracles.prompts import iter_prompts

    import prefixplan
    from prefixplan.logs import LineErrors
    from prefixplan.render.hf import HFRenderer
    from prefixplan.render.stream import SourceOptions

    log = DATA / "litellm-1.110.2-payloads.jsonl"
    analysis = prefixplan.analyze(str(log), tokenizer="auto", simulate=False, rag_whatif=False)
    record = analysis.record
    picked = {t.log_models[0]: t.spec for t in record.tokenizers}
    assert picked == {
        "Qwen/Qwen3-8B": "hf:.cache/tokenizers/qwen3",
        "meta-llama/Meta-Llama-3-8B-Instruct": "hf:.cache/tokenizers/llama3",
        "deepseek-ai/DeepSeek-V3": "hf:.cache/tokenizers/deepseek_v3",
    }
    assert all(t.matches_log_model is True for t in record.tokenizers) and record.summary.exact
    assert set(record.inputs["per_model"]) == set(picked) and len(record.inputs["namespaces"]) == 3
    # every request's ids are its family tokenizer's apply_chat_template ids (on the messages as an
    # engine hands them to the template: render/chatnorm.py)
    from prefixplan.render.chatnorm import engine_messages

    source = SourceOptions(paths=(str(log),), tokenizer="auto")
    for prompt in iter_prompts(source, LineErrors()):
        tok = HFRenderer(ROOT / picked[prompt.request.model][3:]).tokenizer
        expected = tok.apply_chat_template(
            engine_messages(prompt.request.messages),
            tools=list(prompt.request.tools or []) or None,
            add_generation_prompt=True,
        )
        expected = expected["input_ids"] if isinstance(expected, dict) or hasattr(expected, "keys") else expected
        assert list(prompt.tokens) == list(expected)


def _hub_cache(root: Path, repo: str, source: Path) -> Path:
    """A cache laid out as huggingface_hub lays it out: refs/main -> snapshots/<rev>/files."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    snap = root / ("models--" + repo.replace("/", "--")) / "snapshots" / rev
    snap.mkdir(parents=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / f, snap / f)
    (root / ("models--" + repo.replace("/", "--")) / "refs").mkdir()
    (root / ("models--" + repo.replace("/", "--")) / "refs" / "main").write_text(rev)
    return snap


def test_hf_hub_id_from_the_local_cache_and_the_offline_error(tmp_path: Path, monkeypatch, qwen3_path: Path) -> None:
    hub = tmp_path / "hf-home" / "hub"
    snap = _hub_cache(hub, "Qwen/Qwen3-8B", qwen3_path)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    assert cached_snapshot("Qwen/Qwen3-8B") == snap
    assert resolve_hf("Qwen/Qwen3-8B") == snap
    from prefixplan.render import load_renderer

    renderer = load_renderer("hf:Qwen/Qwen3-8B")
    assert renderer.spec == "hf:Qwen/Qwen3-8B" and renderer.label == "hf:Qwen/Qwen3-8B"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(TokenizerError) as err:
        resolve_hf("meta-llama/Llama-3.1-8B-Instruct")
    assert str(hub) in str(err.value) and "HF_HUB_OFFLINE" in str(err.value)
    assert "huggingface-cli download" in err.value.hint
    calls: list[str] = []

    def fake_download(repo: str) -> Path:
        calls.append(repo)
        return snap

    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert resolve_hf("acme/other-model", downloader=fake_download) == snap and calls == ["acme/other-model"]

    def failing(repo: str) -> Path:
        raise OSError("hub unreachable")

    with pytest.raises(TokenizerError) as err:
        resolve_hf("acme/other-model", downloader=failing)
    assert "download failed: OSError: hub unreachable" in str(err.value) and "HF_HUB_OFFLINE=1" in err.value.hint


def test_tiktoken_from_tiktokens_own_cache(tmp_path: Path, monkeypatch) -> None:
    rank = FETCHED / "tiktoken" / "o200k_base.tiktoken"
    if not rank.is_file():
        pytest.skip("tiktoken rank files not fetched: python scripts/fetch_tokenizers.py tiktoken")
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    shutil.copy(rank, cache / hashlib.sha1(url.encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.setenv("PREFIXPLAN_TOKENIZER_DIR", str(tmp_path / "none"))
    monkeypatch.chdir(tmp_path)  # no ./.cache/tokenizers here
    from prefixplan.render.tiktoken_backend import TiktokenRenderer

    assert list(TiktokenRenderer("o200k_base").encode_text("hello world")[0]) == [24912, 2375]
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    with pytest.raises(TokenizerError) as err:
        TiktokenRenderer("o200k_base")
    assert "tiktoken's cache" in str(err.value) and "TIKTOKEN_CACHE_DIR" in err.value.hint


def _gpt4o_log(tmp_path: Path) -> Path:
    system = "You are a helpful assistant for the billing team. Answer briefly and cite the invoice number."
    log = tmp_path / "gpt4o.jsonl"
    rows = [
        {
            "model": "gpt-4o",
            "user": f"u{i}",
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": q}],
        }
        for i, q in enumerate(["Where is my refund?", "Why was I charged twice?", "Change my plan."])
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return log


def test_first_line_and_record_when_the_tokenizer_is_not_the_log_models(tmp_path: Path, capsys) -> None:
    log = _gpt4o_log(tmp_path)
    out = tmp_path / "rec.json"
    code = main(["analyze", str(log), "--no-store", "--no-simulate", "--json", str(out)])
    stdout = capsys.readouterr().out
    assert code == 0
    first = stdout.splitlines()[0]
    assert first.startswith("warning: tokenizer mistral:nemo is not the tokenizer of the log's model (gpt-4o)")
    assert "APPROXIMATE" in first and "--tokenizer tiktoken:o200k_base" in first
    assert stdout.splitlines()[1].startswith(f"prefixplan analyze — {log} (openai-chat)")
    record = json.loads(out.read_text())
    tok = record["tokenizer"]
    assert tok["matches_log_model"] is False and tok["log_models"] == ["gpt-4o"]
    assert tok["suggested"] == "--tokenizer tiktoken:o200k_base"
    assert record["summary"]["exact"] is False
    assert "tokenizer mistral:nemo is not the log model's (gpt-4o)" in record["summary"]["approximate_reason"]
    code = main(["analyze", str(log), "--no-store", "--no-simulate", "-q"])
    assert code == 0 and "warning: tokenizer mistral:nemo" in capsys.readouterr().err  # -q: on stderr


def test_no_warning_when_it_matches_or_cannot_be_told(tmp_path: Path, capsys) -> None:
    log = tmp_path / "nemo.jsonl"
    log.write_text(
        json.dumps({"model": "mistralai/Mistral-Nemo-Instruct-2407", "messages": [{"role": "user", "content": "hi"}]})
        + "\n"
        + json.dumps({"model": "acme-chat", "messages": [{"role": "user", "content": "hi"}]})
        + "\n"
    )
    out = tmp_path / "rec.json"
    assert main(["analyze", str(log), "--no-store", "--no-simulate", "--json", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert stdout.splitlines()[0].startswith("prefixplan analyze")
    assert json.loads(out.read_text())["tokenizer"].get("matches_log_model") is None  # acme-chat: unknown
    log.write_text(
        json.dumps({"model": "mistralai/Mistral-Nemo-Instruct-2407", "messages": [{"role": "user", "content": "hi"}]})
        + "\n"
    )
    assert main(["analyze", str(log), "--no-store", "--no-simulate", "--json", str(out)]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text())["tokenizer"]["matches_log_model"] is True


def test_old_records_without_the_field_still_load() -> None:
    info = TokenizerInfo.from_json({"spec": "mistral:nemo", "label": "x", "fingerprint": None, "exact": True})
    assert info.matches_log_model is None and info.log_models == () and "matches_log_model" not in info.to_json()
    again = TokenizerInfo.from_json(
        TokenizerInfo("s", "l", None, True, matches_log_model=False, log_models=("m",)).to_json()
    )
    assert again.matches_log_model is False and again.log_models == ("m",)
    record = {"schema_version": 1, "candidates": [], "tokenizer": {"spec": "hf:x", "label": "x", "exact": True}}
    assert AnalysisRecord.from_json(record).tokenizer.matches_log_model is None


def test_docs_family_table_matches_the_code() -> None:
    from prefixplan.render.resolve import FAMILIES

    text = (ROOT / "docs" / "logs.md").read_text(encoding="utf-8")
    for family in FAMILIES:
        row = next((line for line in text.splitlines() if line.startswith(f"| {family.name} |")), None)
        assert row is not None, f"docs/logs.md has no family row for {family.name}"
        assert f"`{family.spec}`" in row and (family.fetched is None or f"`{family.fetched}`" in row)


def test_sglang_url_asks_the_server(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from fake_engine import FakeEngine, char_tokenize, chat_text

    import prefixplan

    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hello"}]
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"model": "fake-model", "messages": messages}) + "\n")
    with FakeEngine("sglang") as fake:
        url = fake.url
        analysis = prefixplan.analyze(str(log), tokenizer=f"sglang:{url}", simulate=False, rag_whatif=False)
    tok = analysis.record.tokenizer
    assert tok.spec == f"sglang:{url}" and "server /tokenize" in tok.label
    assert analysis.record.summary.prompt_tokens == len(char_tokenize(chat_text(messages)))
    assert tok.matches_log_model is True  # the server serves the log's model


def test_a_damaged_rank_file_names_file_and_line(tmp_path: Path) -> None:
    from prefixplan.render.tiktoken_backend import read_ranks

    good = tmp_path / "o200k_base.tiktoken"
    good.write_bytes(b"aGVsbG8= 0\nIHdvcmxk 1\n")
    assert read_ranks(good) == {b"hello": 0, b" world": 1}
    bad = tmp_path / "bad.tiktoken"
    bad.write_bytes(b"aGVsbG8= 0\nnot base64! x\n")
    with pytest.raises(TokenizerError, match=r"bad\.tiktoken:2: not a tiktoken rank line"):
        read_ranks(bad)
