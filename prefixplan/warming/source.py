"""Where a warm plan's prefixes and the fleet come from: analysis records, the store, endpoint files.

Endpoint file (YAML)::

    replicas:
      - url: http://10.0.0.1:8000
        name: gpu-a            # optional label used in output and the store
        api_key_env: VLLM_KEY  # the *name* of an env var; keys never appear in files
        headers: {X-Team: search}
        verify_tls: true       # false, or a CA bundle path
      - url: http://10.0.0.2:8000
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from prefixplan.analysis.record import AnalysisRecord, CandidateRecord, TokenizerInfo
from prefixplan.analysis.record_io import load_record
from prefixplan.core import yamlsafe
from prefixplan.engines.endpoint import Endpoint
from prefixplan.errors import InputError, PrefixplanError, UsageError
from prefixplan.keys import parse_key_ref
from prefixplan.warming.plan import WarmCandidate, WarmSource

_SECRET_FIELDS = ("api_key", "apikey", "token", "password", "authorization")
_SECRET_HEADER_WORDS = ("auth", "key", "token", "secret", "password", "cookie", "session", "credential")


def secret_header(name: str) -> bool:
    """True for a header that carries credentials (Authorization, X-Api-Key, Cookie, ...)."""
    low = name.lower()
    return any(word in low for word in _SECRET_HEADER_WORDS)


def candidate_from_record(
    c: CandidateRecord, lookup: Callable[[str], Sequence[int] | None] | None = None
) -> WarmCandidate:
    """An analysis candidate as a warm candidate (withheld ids filled from the store when the
    candidate has a registered key that ``lookup`` knows)."""
    ids = c.token_ids
    if ids is None and c.key and lookup is not None:
        found = lookup(c.key)
        ids = tuple(int(i) for i in found) if found is not None else None
    return WarmCandidate(
        rank=c.rank,
        name=c.name or (parse_key_ref(c.key)[0] if c.key else f"prefix-{c.rank}"),
        key=c.key,
        token_ids=ids,
        length=len(ids) if ids is not None else c.length,
        value=c.marginal_tokens,
        namespace=c.namespace or None,
        model=c.model,
        label=c.label,
        token_hash=c.token_hash,
        parent=c.parent,
        example=c.example,
        parts=c.parts,
    )


def source_from_record(
    record: AnalysisRecord, lookup: Callable[[str], Sequence[int] | None] | None = None
) -> WarmSource:
    """The candidates of an analysis record (``prefixplan analyze --json``)."""
    return WarmSource(
        candidates=tuple(candidate_from_record(c, lookup) for c in record.candidates),
        tokenizer=None if record.tokenizer.spec == "trace" else record.tokenizer,
        block_size=record.block_size,
        origin="analysis",
    )


def latest_source(db: str | None = None) -> WarmSource:
    """The newest analysis in the store: its JSON record file when still present, else the
    stored candidates (the store keeps no tokenizer probe, so pre-flight cannot compare ids).

    Raises:
        UsageError: the store holds no analysis.
    """
    from prefixplan.store import open_store

    lookup = store_token_lookup(db)
    with open_store(db) as store:
        runs = store.analyses()
        if not runs:
            raise UsageError(
                "the store holds no analysis",
                hint="run prefixplan analyze LOG --json FILE first, or pass --analysis FILE",
            )
        newest = runs[0]
        path = newest.get("record_path")
        if path and Path(path).is_file():
            return source_from_record(load_record(path), lookup)
        stored = store.analysis_candidates(int(newest["id"]))
    cands = tuple(
        candidate_from_record(CandidateRecord.from_json(c, f"stored analysis {newest['id']}: candidates[{i}]"), lookup)
        for i, c in enumerate(stored)
    )
    return WarmSource(candidates=cands, tokenizer=None, block_size=None, origin="store")


def store_token_lookup(db: str | None = None) -> Callable[[str], Sequence[int] | None]:
    """``key -> token ids`` from the store's versions (None when not stored)."""

    def lookup(key: str) -> Sequence[int] | None:
        from prefixplan.store import open_store

        name, version = parse_key_ref(key)
        try:
            with open_store(db) as store:
                rec = store.get(name, version)
                if rec is None:
                    return None
                return store.token_ids(rec.name, rec.version)
        except PrefixplanError:
            return None

    return lookup


def source_from_store_keys(keys: Sequence[str], db: str | None = None) -> WarmSource:
    """Registered keys with their stored token ids (``warm --keys`` without an analysis)."""
    from prefixplan.store import open_store

    cands = []
    fingerprint = None
    with open_store(db) as store:
        for rank, key in enumerate(keys, start=1):
            name, version = parse_key_ref(key)
            rec = store.get(name, version)
            if rec is None:
                raise UsageError(f"key {key} is not registered", hint="see prefixplan keys list")
            ids = store.token_ids(rec.name, rec.version)
            fingerprint = fingerprint or rec.tokenizer_fingerprint
            cands.append(
                WarmCandidate(
                    rank=rank,
                    name=rec.name,
                    key=str(rec.key),
                    token_ids=tuple(ids) if ids is not None else None,
                    length=rec.token_count or (len(ids) if ids else 0),
                    namespace=rec.namespace,
                    token_hash=rec.token_hash,
                    label=rec.kind,
                )
            )
    tok = TokenizerInfo(spec="", label="stored key", fingerprint=fingerprint, exact=True) if fingerprint else None
    return WarmSource(candidates=tuple(cands), tokenizer=tok, origin="store")


def endpoints_from_options(urls: Sequence[str], file: str | Path | None, api_key_env: str | None) -> list[Endpoint]:
    """``--endpoint URL`` (repeatable) plus the replicas of ``--endpoints FILE``."""
    out = [Endpoint(url=u, api_key_env=api_key_env) for u in urls]
    if file is not None:
        out.extend(load_endpoints(file, default_api_key_env=api_key_env))
    seen = set()
    for e in out:
        if e.label in seen:
            raise UsageError(f"endpoint {e.label} listed twice")
        seen.add(e.label)
    return out


def load_endpoints(path: str | Path, *, default_api_key_env: str | None = None) -> list[Endpoint]:
    """Replicas of an endpoints YAML file (format in the module docstring).

    Raises:
        InputError: unreadable file, bad YAML, or a replica without ``url``; a literal secret
            field (``api_key``, ``token``, ...) is refused: name an env var with ``api_key_env``.
    """
    import yaml

    p = Path(path)
    try:
        data = yamlsafe.load(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"{p}: cannot read endpoints file: {err}") from None
    except yaml.YAMLError as err:
        raise InputError(f"{p}: invalid YAML: {err}") from None
    replicas = data.get("replicas") if isinstance(data, dict) else data
    if not isinstance(replicas, list) or not replicas:
        raise InputError(f"{p}: expected a 'replicas' list")
    out = []
    for i, r in enumerate(replicas):
        where = f"{p}: replicas[{i}]"
        if isinstance(r, str):
            r = {"url": r}
        if not isinstance(r, dict) or not r.get("url"):
            raise InputError(f"{where}: needs a url")
        for bad in _SECRET_FIELDS:
            if bad in {k.lower() for k in r}:
                raise InputError(f"{where}.{bad}: secrets do not belong in files; set api_key_env: ENV_VAR_NAME")
        headers = r.get("headers") or {}
        if not isinstance(headers, dict):
            raise InputError(f"{where}.headers: expected a mapping")
        for name in headers:
            if secret_header(str(name)):
                raise InputError(
                    f"{where}.headers.{name}: credentials do not belong in files",
                    hint="put the value in an environment variable and name it with api_key_env: ENV_VAR_NAME",
                )
        verify = r.get("verify_tls", True)
        if not isinstance(verify, (bool, str)):
            raise InputError(f"{where}.verify_tls: expected true, false or a CA bundle path")
        try:
            out.append(
                Endpoint(
                    url=str(r["url"]),
                    headers=tuple((str(k), str(v)) for k, v in headers.items()),
                    api_key_env=r.get("api_key_env") or default_api_key_env,
                    verify_tls=verify,
                    name=str(r["name"]) if r.get("name") else None,
                )
            )
        except UsageError as err:
            raise InputError(f"{where}.url: {err}", hint=err.hint) from None
    return out
