"""Requests that carry the engine's own token ids (vLLM / SGLang server logs).

Their ids are what the engine prefilled, so they are analysed as they are: no tokenizer is
needed and the result is exact. When a tokenizer was chosen explicitly for the request's model
and the request also carries its messages (the logged JSON body), the request is rendered too:
if the rendering gives the same ids, its segment spans (system, tools, turns) label the prefix;
if not, the logged ids are kept and the difference is counted (the tokenizer is not the
engine's, or the template differs).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from prefixplan.core.hashes import segment_hash
from prefixplan.core.types import ENGINE_FORMATS, Prompt, Request, Segment, as_token_ids
from prefixplan.errors import TokenizerError

ENGINE_SPEC = "engine"
ENGINE_LABEL = "token ids from the engine log"


def carries_engine_ids(req: Request) -> bool:
    """True for a request whose ``prompt_ids`` came from an engine's own log."""
    return req.prompt_ids is not None and req.format in ENGINE_FORMATS


def ids_prompt(req: Request) -> Prompt:
    """The request as its logged ids: one ``raw`` segment, exact."""
    assert req.prompt_ids is not None
    tokens = as_token_ids(np.asarray(req.prompt_ids, dtype=np.uint32))
    seg = Segment("raw", 0, len(tokens), segment_hash(tokens.tobytes()))
    return Prompt(req, tokens, (seg,), (), exact=True)


def adopt(rendered: Prompt, req: Request) -> tuple[Prompt, bool]:
    """The rendered prompt when its ids equal the logged ones (spans kept), else the logged ids."""
    assert req.prompt_ids is not None
    logged = np.asarray(req.prompt_ids, dtype=np.uint32)
    if rendered.tokens.shape == logged.shape and np.array_equal(rendered.tokens, logged):
        return replace(rendered, request=req, exact=True), True
    return ids_prompt(req), False


def raw_ids_prompt(req: Request) -> Prompt:
    """A completions request logged with token ids: the ids are the prompt."""
    if req.prompt_ids is None:
        raise TokenizerError(f"{req.source}:{req.line_no}: request has no messages, prompt or prompt ids")
    tokens = as_token_ids(np.asarray(req.prompt_ids, dtype=np.uint32))
    seg = Segment("raw", 0, len(tokens), segment_hash(tokens.tobytes()))
    return Prompt(req, tokens, (seg,), (), exact=True)
