"""The fixed text every tokenizer check encodes (analysis records, warm pre-flight, recipes)."""

from __future__ import annotations

TOKENIZER_PROBE_TEXT = (
    "prefixplan tokenizer probe v1: Hello, World! 0123456789 +-*/=<> "
    "ünïcödé naïve café — “quotes” 日本語のテキスト 中文 한국어 Привет мир "
    '\tTabs\tand  double  spaces\n\nfn main() { println!("{}", 42); } 🚀✨'
)
"""Fixed text tokenized through a server's ``/tokenize`` to check its tokenizer.

Tokenized without special tokens. The analysis stores the ids its own tokenizer gives for
this text (``record["tokenizer"]["probe_ids"]``); a server returning other ids has another
tokenizer. Changing this text changes every stored probe: don't.
"""
