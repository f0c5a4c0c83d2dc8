"""Tokenizers named the way engines name them: model families, ``--tokenizer auto``, hub ids.

:data:`FAMILIES` is the one table that maps a model name (as a log or a server names it:
``Qwen/Qwen3-8B``, ``meta-llama/Llama-3.1-8B-Instruct``, ``gpt-4o``) to the tokenizer spec that
renders it. ``--tokenizer auto`` uses it per model; the analysis uses it to say when the chosen
tokenizer is not the log model's (``tokenizer.matches_log_model``) and which spec to use instead.

``hf:ORG/NAME`` (a hub id, not a local folder) resolves from the local Hugging Face cache
(``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; the
``models--ORG--NAME/snapshots/<rev>`` layout, ``refs/main`` naming the revision); when it is not
cached and ``HF_HUB_OFFLINE`` is not set, only the tokenizer files are downloaded. ``auto`` falls
back to the files ``scripts/fetch_tokenizers.py`` fetched for the family (``.cache/tokenizers/NAME``
or ``$PREFIXPLAN_TOKENIZER_DIR/NAME``) when the hub cache has no copy.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prefixplan.errors import TokenizerError, UsageError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


@dataclass(frozen=True, slots=True)
class Family:
    """A model family: which names belong to it and which tokenizer renders it.

    Attributes:
        name: the family's short name (``qwen3``).
        pattern: a regular expression searched in the lower-cased model name.
        spec: the ``--tokenizer`` spec that renders the family's models.
        fetched: name of the tokenizer ``scripts/fetch_tokenizers.py`` fetches for the family (the
            fallback of ``auto`` when the hub cache has no copy), or None.
        note: what is exact and what is not.
    """

    name: str
    pattern: str
    spec: str
    fetched: str | None = None
    note: str = ""

    def matches(self, model: str) -> bool:
        return re.search(self.pattern, model.lower()) is not None


FAMILIES: tuple[Family, ...] = (
    Family(
        "qwen3", r"qwen-?3(?![.\d])", "hf:Qwen/Qwen3-8B", "qwen3", "Qwen3 tokenizer and chat template (tools, thinking)"
    ),
    Family("qwen2.5", r"qwen-?2\.5", "hf:Qwen/Qwen2.5-7B-Instruct", None, "Qwen2.5 tokenizer and chat template"),
    Family(
        "llama3.1",
        r"llama-?3\.[123]",
        "hf:meta-llama/Llama-3.1-8B-Instruct",
        None,
        "Llama 3.1-3.3 template (date header, tools); the Llama 3 tokenizer",
    ),
    Family(
        "llama3",
        r"llama-?3(?![.\d])",
        "hf:meta-llama/Meta-Llama-3-8B-Instruct",
        "llama3",
        "Llama 3 tokenizer and its original chat template",
    ),
    Family(
        "deepseek-v3",
        r"deepseek-?(v3|chat)",
        "hf:deepseek-ai/DeepSeek-V3",
        "deepseek_v3",
        "DeepSeek-V3 tokenizer and chat template",
    ),
    Family("deepseek-r1", r"deepseek-?(r1|reasoner)", "hf:deepseek-ai/DeepSeek-R1", None, "DeepSeek-R1 template"),
    Family("gemma3", r"gemma-?3(?![.\d])", "hf:google/gemma-3-27b-it", "gemma3", "Gemma 3 tokenizer and chat template"),
    Family("gpt-oss", r"gpt-?oss", "hf:openai/gpt-oss-20b", None, "gpt-oss (harmony) tokenizer and template"),
    Family("mistral-nemo", r"mistral-?nemo|nemo-instruct", "mistral:nemo", None, "shipped with mistral-common"),
    Family("mistral-v3", r"mistral-7b-instruct-v0\.3", "mistral:v3", None, "shipped with mistral-common"),
    Family("mistral-v7", r"mistral-large-(instruct-)?2411", "mistral:v7", None, "shipped with mistral-common"),
    Family(
        "openai-o200k",
        r"(^|/)(gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|chatgpt-4o|o[134](-|$))",
        "tiktoken:o200k_base",
        None,
        "APPROXIMATE: OpenAI does not publish its chat rendering",
    ),
    Family(
        "openai-cl100k",
        r"(^|/)(gpt-4(?![o.\d])|gpt-4-|gpt-3\.5)",
        "tiktoken:cl100k_base",
        None,
        "APPROXIMATE: OpenAI does not publish its chat rendering",
    ),
)
_NO_TOKENIZER = {
    "claude": "Anthropic does not publish Claude's tokenizer; any count is an approximation "
    "(--tokenizer-map MODEL=tiktoken:o200k_base accepts one)",
    "gemini": "Google does not publish Gemini's tokenizer; any count is an approximation "
    "(--tokenizer-map MODEL=tiktoken:o200k_base accepts one)",
}
_FETCHED_NAMES = {f.fetched: f for f in FAMILIES if f.fetched}


def family_of_model(model: str | None) -> Family | None:
    """The family a model name belongs to (first match in :data:`FAMILIES`), or None."""
    if not model:
        return None
    for family in FAMILIES:
        if family.matches(model):
            return family
    return None


def family_of_spec(spec: str, served_model: str | None = None) -> Family | None:
    """The family a tokenizer spec renders, or None when it cannot be told.

    ``served_model`` is the model a ``vllm:``/``sglang:`` server says it serves.
    """
    scheme, _, rest = spec.partition(":")
    if scheme in ("vllm", "sglang"):
        return family_of_model(served_model)
    for family in FAMILIES:
        if family.spec == spec:
            return family
    if scheme == "hf":
        path = Path(rest)
        if path.name in _FETCHED_NAMES and path.parent.name == "tokenizers":
            return _FETCHED_NAMES[path.name]
        return family_of_model(rest) or family_of_model(path.name)
    if scheme == "tiktoken":
        base = Path(rest).stem
        return next((f for f in FAMILIES if f.spec == f"tiktoken:{base}"), None)
    return None


def suggestion(models: list[str]) -> str | None:
    """The ``--tokenizer`` flag that renders ``models``: one family's spec, or ``auto`` (with the
    specs it picks) for a log that mixes families; None when no model is in the table."""
    specs = {m: f.spec for m in models if (f := family_of_model(m)) is not None}
    if not specs:
        return None
    if len(set(specs.values())) == 1:
        return f"--tokenizer {next(iter(specs.values()))}"
    shown = ", ".join(f"{m} -> {s}" for m, s in list(specs.items())[:3]) + (" ..." if len(specs) > 3 else "")
    return f"--tokenizer auto ({shown})"


def auto_spec(model: str | None, *, exists: Callable[[str], bool] | None = None) -> str:
    """The spec ``--tokenizer auto`` uses for ``model``.

    A family whose hub tokenizer is not cached but whose fetched files are present uses those
    (``hf:<dir>``). Raises :class:`UsageError` listing the known families for an unknown model.
    """
    if not model:
        raise UsageError(
            "--tokenizer auto: a request has no model name to choose a tokenizer by",
            hint="pass --tokenizer SPEC for it (or --tokenizer-map MODEL=SPEC)",
        )
    family = family_of_model(model)
    if family is None:
        lowered = model.lower()
        why = next((text for key, text in _NO_TOKENIZER.items() if key in lowered), None)
        choices = ", ".join(f"{f.name} ({f.spec})" for f in FAMILIES)
        raise UsageError(
            f"--tokenizer auto: no known tokenizer for model {model!r}" + (f": {why}" if why else ""),
            hint=f"pass --tokenizer-map '{model}=SPEC'; known families: {choices}",
        )
    if family.spec.startswith("hf:") and family.fetched:
        available = exists or _hub_or_fetched_available
        if not available(family.spec[3:]):
            fetched = fetched_dir(family.fetched)
            if fetched is not None:
                if fetched.is_relative_to(Path.cwd()):
                    fetched = fetched.relative_to(Path.cwd())
                return f"hf:{fetched}"
    return family.spec


# -- local tokenizer files -------------------------------------------------------------------------


def tokenizer_roots() -> list[Path]:
    """Folders searched for fetched tokenizers (``scripts/fetch_tokenizers.py``)."""
    roots = []
    env = os.environ.get("PREFIXPLAN_TOKENIZER_DIR")
    if env:
        roots.append(Path(env))
    roots.append(Path.cwd() / ".cache" / "tokenizers")
    roots.append(Path.home() / ".cache" / "prefixplan" / "tokenizers")
    return roots


def fetched_dir(name: str) -> Path | None:
    """The folder of a fetched tokenizer (with ``tokenizer.json``), or None."""
    for root in tokenizer_roots():
        path = root / name
        if (path / "tokenizer.json").is_file():
            return path
    return None


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache folder, as ``huggingface_hub`` finds it."""
    env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if env:
        return Path(env).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def looks_like_hub_id(name: str) -> bool:
    """``ORG/NAME`` that is not an existing local path."""
    return re.fullmatch(r"[\w.-]+/[\w.-]+", name) is not None and not Path(name).exists()


def cached_snapshot(repo_id: str, cache: Path | None = None) -> Path | None:
    """The cached snapshot folder of ``repo_id`` holding its tokenizer, or None."""
    root = (cache or hub_cache_dir()) / ("models--" + repo_id.replace("/", "--"))
    snapshots = root / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = root / "refs" / "main"
    candidates: list[Path] = []
    if ref.is_file():
        candidates.append(snapshots / ref.read_text(encoding="utf-8").strip())
    candidates += sorted((p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in candidates:
        if (path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file():
            return path
    return None


def _hub_or_fetched_available(repo_id: str) -> bool:
    return cached_snapshot(repo_id) is not None


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def download_tokenizer(repo_id: str) -> Path:  # pragma: no cover - needs the hub
    """Download only the tokenizer files of ``repo_id`` into the hub cache."""
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id, allow_patterns=list(TOKENIZER_FILES) + ["*.jinja"]))


def resolve_hf(name: str, *, downloader: Callable[[str], Path] | None = None, cache: Path | None = None) -> Path:
    """The local folder of ``hf:NAME``: a folder as given, else the hub cache, else a download.

    Raises:
        TokenizerError: not cached and offline (or the download failed); the message names the
            cache folder and ``HF_HUB_OFFLINE``.
    """
    path = Path(name).expanduser()
    if path.exists() or not looks_like_hub_id(name):
        return path
    found = cached_snapshot(name, cache)
    if found is not None:
        return found
    where = cache or hub_cache_dir()
    family = family_of_model(name)
    fetched = (
        f"; or fetch the family's files: python scripts/fetch_tokenizers.py {family.fetched}"
        if family and family.fetched
        else ""
    )
    if _offline() and downloader is None:
        raise TokenizerError(
            f"hf:{name}: not in the Hugging Face cache ({where}) and HF_HUB_OFFLINE is set, so it is not downloaded",
            hint=f"download it where the hub is reachable (huggingface-cli download {name} --include 'tokenizer*' "
            f"'*.jinja'), point HF_HOME/HF_HUB_CACHE at a cache that has it, or pass hf:/path/to/folder{fetched}",
        )
    try:
        return (downloader or download_tokenizer)(name)
    except Exception as exc:
        raise TokenizerError(
            f"hf:{name}: not in the Hugging Face cache ({where}) and the download failed: {type(exc).__name__}: "
            f"{str(exc)[:200]}",
            hint=f"set HF_HUB_OFFLINE=1 and provide a cache with it (HF_HOME/HF_HUB_CACHE), or pass hf:/path/to/folder"
            f"{fetched}",
        ) from exc
