"""``warm --recipes``: render declared prefixes (recipes) into the exact token ids a server caches.

Each recipe becomes the request it describes (:func:`recipe_form`):

* ``render: chat`` -- a system message with the system text, the tool schemas (JSON or YAML
  files, parsed; a bare ``{name, parameters}`` schema is wrapped as an OpenAI function tool),
  and a first user message that *starts* with the documents (their chunks concatenated, exact
  bytes) and continues with the user's question;
* ``render: completion`` -- a plain prompt made of the parts' exact text in order (system,
  each tool's bytes, each document chunk), continued by the question.

The request is rendered with the server's tokenizer (``--tokenizer``, else the recipe's
``tokenizer:``, else ``vllm:URL`` of the first endpoint, i.e. the server's own ``/tokenize``) and
the ids are cut where the user's question starts: at the first ``user`` segment of the rendered
prompt, or, when documents lead the user message or the prompt is plain text, at the longest
common prefix of renderings with questions that differ from the first character on (questions
starting with a letter or a digit, as real ones do; the last token of a document may merge with
a leading space or newline). That cut is exactly what every real request of the recipe shares.

The keys are the recipes' ``name@vN``; when ``prefixplan.lock`` has an entry for the key and its
hash differs from the recipe's content hash, the recipe is skipped (the content changed without
a version bump: ``prefixplan check`` reports it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prefixplan.analysis.record import TokenizerInfo
from prefixplan.core import yamlsafe
from prefixplan.errors import TokenizerError, UsageError
from prefixplan.keys.recipe_model import Recipe, display_path
from prefixplan.warming.plan import WarmCandidate, WarmSource
from prefixplan.warming.prompts import (
    EXTRA_QUESTIONS,
    PROBE_QUESTION,
    WARM_QUESTION,
    PromptForm,
)


@dataclass(frozen=True, slots=True)
class RenderedRecipe:
    """A recipe rendered to its shared prefix."""

    recipe: Recipe
    spec: str
    token_ids: tuple[int, ...]
    form: PromptForm
    cut: str  # "user segment" | "common prefix"


def _tool_schema(data: bytes, path: Path | None, where: str) -> dict[str, Any]:
    text = data.decode("utf-8")
    if path is not None and path.suffix.lower() in (".yaml", ".yml"):
        obj = yamlsafe.load(text)
    else:
        obj = json.loads(text)
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: a tool schema must be a mapping")
    if "type" not in obj and "name" in obj:
        obj = {"type": "function", "function": obj}
    return obj


def recipe_form(recipe: Recipe) -> PromptForm:
    """The request a recipe describes, without the user's question (module docstring).

    Raises:
        UsageError: a part is not UTF-8 text or a tool is not a JSON/YAML mapping.
    """
    where = f"{display_path(recipe.file)}: {recipe.field_path}"
    texts: dict[str, list[str]] = {"system": [], "tool": [], "document": []}
    tools: list[dict[str, Any]] = []
    for part in recipe.parts:
        try:
            texts[part.kind].append(part.data.decode("utf-8"))
            if part.kind == "tool" and recipe.render == "chat":
                tools.append(_tool_schema(part.data, part.path, f"{where}.{part.label}"))
        except (UnicodeDecodeError, ValueError) as err:
            raise UsageError(f"{where}.{part.label} ({part.source}): cannot be rendered: {err}") from None
    if recipe.render == "completion":
        return PromptForm(mode="completion", prompt_lead="".join(texts["system"] + texts["tool"] + texts["document"]))
    messages = tuple({"role": "system", "content": t} for t in texts["system"])
    return PromptForm(mode="chat", messages=messages, tools=tuple(tools) or None, user_lead="".join(texts["document"]))


def _request(recipe: Recipe, form: PromptForm, question: str) -> Any:
    from prefixplan.core.types import Request

    src = display_path(recipe.file)
    if form.mode == "completion":
        return Request(
            source=src,
            line_no=recipe.line,
            id=recipe.name,
            format="openai-completion",
            model=recipe.model,
            prompt=form.prompt(question),
        )
    msgs, tools = form.chat(question)
    return Request(
        source=src,
        line_no=recipe.line,
        id=recipe.name,
        format="openai-chat",
        model=recipe.model,
        messages=tuple(msgs),
        tools=tuple(tools) if tools else None,
    )


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def render_recipe(recipe: Recipe, renderer: Any) -> RenderedRecipe:
    """Render ``recipe`` with ``renderer`` (a :class:`prefixplan.render.Renderer`) and cut the
    ids where the user's question starts (module docstring).

    Raises:
        TokenizerError: the renderer cannot render the request.
        UsageError: the recipe's parts cannot form a request.
    """
    form = recipe_form(recipe)
    questions = (WARM_QUESTION, PROBE_QUESTION, *EXTRA_QUESTIONS)
    prompts = [renderer.render(_request(recipe, form, q)) for q in questions]
    ids = [p.tokens.tolist() for p in prompts]
    common = min(_common(ids[0], other) for other in ids[1:])
    cut, how = common, "common prefix"
    if form.mode == "chat" and not form.user_lead:
        users = [s.start for s in prompts[0].segments if s.kind == "user"]
        if users and min(users) <= common:
            cut, how = min(users), "user segment"
    if cut == 0:
        raise UsageError(f"recipe {recipe.key}: its rendered requests share no prefix")
    return RenderedRecipe(
        recipe=recipe, spec=str(renderer.spec), token_ids=tuple(int(i) for i in ids[0][:cut]), form=form, cut=how
    )


def _select(recipes: Sequence[Recipe], keys: Sequence[str] | None) -> list[Recipe]:
    if not keys:
        return sorted(recipes, key=lambda r: (not r.pin, r.name))
    from prefixplan.keys import parse_key_ref

    out: list[Recipe] = []
    for k in keys:
        name, ver = parse_key_ref(k)
        hit = [r for r in recipes if r.name == name and (ver is None or r.version == ver)]
        if not hit:
            have = ", ".join(str(r.key) for r in recipes) or "none"
            raise UsageError(f"key {k} is not among the recipes ({have})")
        out.extend(r for r in hit if r not in out)
    return out


def source_from_recipes(
    recipes: Sequence[Recipe],
    *,
    tokenizer: str | None = None,
    endpoint: Any = None,
    model: str | None = None,
    keys: Sequence[str] | None = None,
    lock: Any = None,
    load: Callable[[str], Any] | None = None,
) -> WarmSource:
    """The rendered recipes as warm candidates (token ids cut at the user's question) with the
    tokenizer's probe ids, for :func:`prefixplan.warming.plan.plan_warm`.

    Args:
        recipes: loaded recipes (:func:`prefixplan.keys.recipes.load_recipes`).
        tokenizer: a tokenizer spec for every recipe (``hf:PATH``, ``vllm:URL``, ...).
        endpoint: the first replica (:class:`~prefixplan.engines.base.Endpoint`); its ``/tokenize``
            renders recipes that name no tokenizer when ``tokenizer`` is not given.
        model: served model name for ``vllm:`` rendering (default: the server's first).
        keys: warm only these ``name@vN`` / ``name`` recipes.
        lock: a parsed lock file (:class:`prefixplan.keys.lockfile.Lock`) or None.
        load: ``spec -> renderer`` (default: :func:`prefixplan.render.load_renderer`).

    Raises:
        UsageError: no tokenizer for a recipe, unknown keys, or recipes whose tokenizers differ.
    """
    from prefixplan.core.probe import TOKENIZER_PROBE_TEXT

    chosen = _select(recipes, keys)
    if not chosen:
        raise UsageError("no recipes to warm")
    loaded: dict[str, Any] = {}

    def renderer_for(spec: str) -> Any:
        if spec not in loaded:
            if load is not None:
                loaded[spec] = load(spec)
            elif spec.startswith("vllm:") and endpoint is not None and spec == f"vllm:{endpoint.base_url}":
                from prefixplan.render.vllm_remote import VLLMRenderer

                loaded[spec] = VLLMRenderer(endpoint.base_url, model=model, api_key_env=endpoint.api_key_env)
            else:
                from prefixplan.render import load_renderer

                loaded[spec] = load_renderer(spec)
        return loaded[spec]

    cands: list[WarmCandidate] = []
    probes: dict[str, list[int]] = {}
    for rank, recipe in enumerate(chosen, start=1):
        spec = tokenizer or recipe.tokenizer or (f"vllm:{endpoint.base_url}" if endpoint is not None else None)
        if spec is None:
            raise UsageError(
                f"recipe {recipe.key} names no tokenizer and no endpoint is given",
                hint="pass --tokenizer SPEC or --endpoint URL (its /tokenize renders the recipe)",
            )
        base = WarmCandidate(
            rank=rank,
            name=recipe.name,
            key=str(recipe.key),
            token_ids=None,
            length=0,
            namespace=recipe.model,
            model=recipe.model,
            label="recipe",
        )
        entry = lock.entries.get(str(recipe.key)) if lock is not None else None
        if entry is not None and entry.hash != recipe.content_hash:
            cands.append(
                replace(
                    base,
                    skip_reason=(
                        f"content differs from the lock's {recipe.key} (bump the version and run prefixplan lock; "
                        "prefixplan check names the change)"
                    ),
                )
            )
            continue
        renderer = renderer_for(spec)
        try:
            rendered = render_recipe(recipe, renderer)
        except TokenizerError as err:
            cands.append(replace(base, skip_reason=f"cannot render with {spec}: {err}"))
            continue
        if spec not in probes:
            ids, _ = renderer.encode_text(TOKENIZER_PROBE_TEXT, add_special_tokens=False)
            probes[spec] = [int(i) for i in ids]
        cands.append(
            replace(
                base,
                token_ids=rendered.token_ids,
                length=len(rendered.token_ids),
                value=len(rendered.token_ids),
                form=rendered.form,
            )
        )
    distinct = {json.dumps(p) for p in probes.values()}
    if len(distinct) > 1:
        raise UsageError(
            "the recipes name tokenizers that disagree (" + ", ".join(sorted(probes)) + ")",
            hint="warm them separately (--keys) or pass one --tokenizer",
        )
    tok: TokenizerInfo | None = None
    if probes:
        spec = next(iter(probes))
        r = loaded[spec]
        tok = TokenizerInfo(
            spec=spec,
            label=getattr(r, "label", spec),
            fingerprint=getattr(r, "fingerprint", None),
            exact=bool(getattr(r, "exact", True)),
            probe_ids=tuple(probes[spec]),
        )
    return WarmSource(candidates=tuple(cands), tokenizer=tok, origin="recipes")


def load_lock_if_present(path: str | Path | None) -> Any:
    """The lock file at ``path`` (default ``prefixplan.lock``) when it exists, else None."""
    from prefixplan.keys.lockfile import DEFAULT_LOCK, read_lock

    p = Path(path) if path else Path(DEFAULT_LOCK)
    if not p.is_file():
        if path:
            raise UsageError(f"--lock {path}: file not found")
        return None
    return read_lock(p)
