"""ASCII texts encoded word by word (prefixplan/render/words.py) give the tokenizer's ids.

Against the real tokenizers (Qwen3; Llama 3 when fetched): the ``regex`` engine splits every
ASCII character, pair and short run of the classes the pattern distinguishes exactly as the
tokenizer's own pre-tokenizer does, and random ASCII texts get the ids of a whole-text encode.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixplan.render.boundaries import hf_split_patterns
from prefixplan.render.words import WordEncoder

ROOT = Path(__file__).resolve().parent.parent
ASCII = [chr(c) for c in range(128)]
# One or two of each class the patterns tell apart: letters (cases, the contraction letters),
# digits, whitespace (line feed, carriage return, tab, vertical tab, form feed, space, the
# separators \x1c-\x1f that Python's str.isspace counts), apostrophe, punctuation, controls.
CLASSES = ["a", "S", "t", "1", "\n", "\r", "\t", "\x0b", "\x0c", " ", "\x1c", "\x1f", "'", ".", "/", "\x00", "\x7f"]


@functools.cache
def _backend(name: str) -> Any:
    from tokenizers import Tokenizer

    if name == "qwen3":
        from tests.conftest import qwen3_dir

        folder = qwen3_dir() or ROOT / ".cache" / "tokenizers" / "qwen3"
    else:
        folder = ROOT / ".cache" / "tokenizers" / name
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"{name} tokenizer not fetched: run python scripts/fetch_tokenizers.py {name}")
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


@pytest.fixture(params=["qwen3", "llama3"])
def backend(request: pytest.FixtureRequest) -> Any:
    return _backend(request.param)


def _encoder(backend: Any, **kwargs: Any) -> WordEncoder:
    patterns = hf_split_patterns(backend)
    assert patterns is not None
    words = WordEncoder.for_backend(backend, patterns)
    assert words is not None
    if kwargs:
        words = WordEncoder(backend, words._split.__self__, **kwargs)
    return words


def test_regex_splits_ascii_as_the_tokenizer(backend: Any):
    words = _encoder(backend)
    split = words._split.__self__
    texts = [f"{left}{c}{right}" for c in ASCII for left in ("", "x", " ", "\n", "'", "1") for right in ("", "y", " ")]
    texts += [f"x{a}{b}y" for a, b in itertools.product(ASCII, repeat=2)]
    texts += ["".join(run) for n in (3, 4) for run in itertools.product(CLASSES, repeat=n)]
    reference = backend.pre_tokenizer
    wrong = [t for t in texts if [o for _, o in reference.pre_tokenize_str(t)] != [m.span() for m in split.finditer(t)]]
    assert not wrong, wrong[:5]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(data=st.data())
def test_word_ids_equal_whole_encode(data: st.DataObject):
    backend = _backend("qwen3")
    words = _encoder(backend)
    alphabet = st.sampled_from(CLASSES + [" the", "'s", "'LL", "  ", "\n\n", "123456", "Hello", "!?"])
    texts = data.draw(st.lists(st.lists(alphabet, max_size=30).map("".join), min_size=1, max_size=8))
    got = words.encode(texts)
    assert got == [backend.encode(t, add_special_tokens=False).ids for t in texts]
    assert words._to_model is not None  # new words went through the model directly


def test_new_words_through_the_model_equal_the_joined_encode(backend: Any):
    """The two ways of encoding new pre-tokens (the model after the byte-level mapping; one
    encode joined by a special token) give the same ids, and those of a whole-text encode."""
    direct = _encoder(backend)
    joined = _encoder(backend, max_words=1000)  # built without the model path
    assert direct._to_model is not None and joined._to_model is None
    text = "".join(ASCII) + " Hello, world! It's 2026: x_y = [1, 2]; don't\n\n\tend  "
    texts = [text, text.upper(), "".join(reversed(ASCII))]
    reference = [backend.encode(t, add_special_tokens=False).ids for t in texts]
    assert direct.encode(texts) == joined.encode(texts) == reference


def test_non_ascii_left_to_the_tokenizer_and_memo_bounded(backend: Any):
    bounded = _encoder(backend, max_words=50)  # no separator: each new word encoded alone
    words = _encoder(backend)
    texts = [f"Line {k}: the value of item_{k * 7919} is {k**3}.\n  Next\t'll do" for k in range(40)]
    expected = [backend.encode(t, add_special_tokens=False).ids for t in texts]
    assert bounded.encode(texts[:20]) + bounded.encode(texts[20:]) == expected == words.encode(texts)
    assert len(bounded._memo) == len({w for t in texts[20:] for w in bounded._split(t)})  # emptied once full
    assert words.encode(["café au lait", "plain"]) == [None, backend.encode("plain", add_special_tokens=False).ids]


def test_only_patterns_checked_here():
    """A pattern this module has not checked on ASCII gets no word encoder."""
    backend = _backend("qwen3")
    assert WordEncoder.for_backend(backend, [r"\w+|\s+|[^\w\s]+"]) is None
    assert WordEncoder.for_backend(backend, [*hf_split_patterns(backend), r"\d"]) is None
