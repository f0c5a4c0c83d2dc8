"""The cut rule of prefixplan/render/boundaries.py, checked against each tokenizer family it covers.

For a text ``P + R`` cut at ``len(P)`` where the rule allows it, encoding the parts must give the
ids of the whole: checked for every Basic Multilingual Plane code point (and a stride of the
others) as the first character of ``R``, and for every combination of short ends of ``P`` and
starts of ``R`` drawn from one character of each Unicode class the proof talks about. The rule is
also shown to be needed (a cut it refuses does change the ids) and to cover nothing it was not
proved for. Families whose tokenizer file is not fetched are skipped.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixplan.render.boundaries import CutRule, rule_for_hf, rule_for_patterns

ROOT = Path(__file__).resolve().parent.parent
TOKENIZERS = ROOT / ".cache" / "tokenizers"

Encode = Callable[[list[str]], list[list[int]]]


def _hf(name: str) -> tuple[Encode, CutRule | None]:
    path = TOKENIZERS / name / "tokenizer.json"
    if name == "qwen3":
        from tests.conftest import qwen3_dir

        found = qwen3_dir()
        path = found / "tokenizer.json" if found else path
    if not path.is_file():
        pytest.skip(f"{name} tokenizer not fetched: run python scripts/fetch_tokenizers.py")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    return (lambda texts: [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]), rule_for_hf(tok)


def _tekken() -> tuple[Encode, CutRule | None]:
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    raw = MistralTokenizer.v3(is_tekken=True).instruct_tokenizer.tokenizer
    return (lambda texts: [raw.encode(t, bos=False, eos=False) for t in texts]), rule_for_patterns(
        [raw._model._pat_str]
    )


def _tiktoken(name: str) -> tuple[Encode, CutRule | None]:
    from prefixplan.errors import TokenizerError
    from prefixplan.render.tiktoken_backend import load_encoding

    try:
        enc, _ = load_encoding(name)
    except TokenizerError:
        pytest.skip(f"{name}.tiktoken not fetched: run python scripts/fetch_tokenizers.py tiktoken")
    return enc.encode_ordinary_batch, rule_for_patterns([enc._pat_str])


FAMILIES: dict[str, Callable[[], tuple[Encode, CutRule | None]]] = {
    "qwen3": lambda: _hf("qwen3"),
    "llama3": lambda: _hf("llama3"),
    "deepseek_v3": lambda: _hf("deepseek_v3"),
    "tekken": _tekken,
    "cl100k": lambda: _tiktoken("cl100k_base"),
    "o200k": lambda: _tiktoken("o200k_base"),
}

# one character of each class the proof distinguishes
ALPHABET = [
    "a", "Z", "é", "ǅ", "ʰ", "中", "\u0301", "1", "½", " ", "\t", "\n", "\r", "\u00a0", "\u2028",
    "'", "s", ".", "/", "$", "\x01", "\u200d", "😀",
]  # fmt: skip
SECONDS = ["", "a", "1", " ", "\n", "'", "."]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request: pytest.FixtureRequest) -> tuple[str, Encode, CutRule]:
    encode, rule = FAMILIES[request.param]()
    assert rule is not None, f"{request.param}: the proved rule does not recognise this tokenizer"
    return request.param, encode, rule


def _violations(encode: Encode, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    wholes = encode([p + r for p, r in pairs])
    lefts = encode([p for p, _ in pairs])
    rights = encode([r for _, r in pairs])
    return [pair for pair, w, a, b in zip(pairs, wholes, lefts, rights, strict=True) if list(w) != list(a) + list(b)]


def test_every_code_point_after_a_line_feed(family) -> None:
    _, encode, rule = family
    points = itertools.chain(range(0xD800), range(0xE000, 0x10000), range(0x10000, sys.maxunicode + 1, 61))
    pairs = []
    for cp in points:
        right = chr(cp) + "x"
        if rule.allows("a\n" + right, 2):
            pairs.append(("a\n", right))
    assert len(pairs) > 60_000
    assert _violations(encode, pairs) == []


def test_every_combination_of_short_ends_and_starts(family) -> None:
    _, encode, rule = family
    ends = ["".join(e) + "\n" for n in range(3) for e in itertools.product(ALPHABET, repeat=n)]
    starts = [a + b for a in ALPHABET for b in SECONDS]
    pairs = [(p, r) for p in ends for r in starts if rule.allows(p + r, len(p))]
    assert len(pairs) > 40_000
    assert _violations(encode, pairs) == []


def test_the_rule_refuses_cuts_that_change_the_ids(family) -> None:
    """Whitespace after the line feed (and ``/`` where the punctuation run takes it) does change
    the ids: the exclusions are needed, not decoration."""
    _, encode, rule = family
    refused = [("a\n", "\nb")] + ([("a.\n", "/b")] if "/" in rule.extra else [])
    assert not any(rule.allows(p + r, len(p)) for p, r in refused)
    assert len(_violations(encode, refused)) == len(refused)


def test_the_finder_and_the_rule_agree() -> None:
    finder = CutRule("t", extra="/").pattern()
    for cp in itertools.chain(range(0xD800), range(0xE000, 0x10000)):
        text = "a\n" + chr(cp)
        assert (finder.search(text) is not None) == CutRule("t", extra="/").allows(text, 2), hex(cp)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.text(alphabet=st.sampled_from(["\n", " ", "\t", "a", "/", "\u0301", "é", "\r"]), max_size=40))
def test_the_finders_cut_exactly_where_the_rule_allows(text: str) -> None:
    """Lines end at every cut the rule allows; paragraphs at those after a blank line."""
    rule = CutRule("t", extra="/")
    ends = [m.end() for m in rule.pattern().finditer(text)]
    paragraph_ends = [m.end() for m in rule.paragraph_pattern().finditer(text)]
    allowed = [q for q in range(len(text) + 1) if rule.allows(text, q)]
    assert ends == allowed
    assert paragraph_ends == [q for q in allowed if text[q - 2 : q] == "\n\n"]


def test_nothing_unproved_gets_a_rule(tmp_path) -> None:
    """GPT-2's pattern (no newline alternative: a cut after a line feed changes its
    pre-tokens), a Metaspace (SentencePiece) pipeline and a lowercasing normaliser get no rule."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    gpt2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    assert rule_for_patterns([gpt2]) is None
    tok = Tokenizer(models.BPE(vocab={"a": 0}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    assert rule_for_hf(tok) is None
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    assert rule_for_hf(tok) is None
    qwen = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
    split = pre_tokenizers.Split(pattern=__import__("tokenizers").Regex(qwen), behavior="isolated")
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    assert rule_for_hf(tok) is not None  # the structure the proof covers
    tok.normalizer = normalizers.Lowercase()
    assert rule_for_hf(tok) is None
