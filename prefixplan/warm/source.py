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

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prefixplan.engines.base import Endpoint
from prefixplan.errors import InputError, PrefixplanError, UsageError

_SECRET_FIELDS = ("api_key", "apikey", "token", "password", "authorization")


def load_record(path: str | Path) -> dict[str, Any]:
    """An analysis record written by ``prefixplan analyze --json FILE``."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"{p}: cannot read analysis record: {err}") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{p}: not JSON: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("candidates"), list):
        raise InputError(f"{p}: not an analysis record (no 'candidates' list)")
    return data


def latest_record(db: str | None = None) -> dict[str, Any]:
    """The newest analysis in the store: its JSON record file when still present, else the
    stored candidates (without tokenizer probe information).

    Raises:
        UsageError: the store holds no analysis.
    """
    from prefixplan.store import open_store

    with open_store(db) as store:
        runs = store.analyses()
        if not runs:
            raise UsageError("the store holds no analysis", hint="run prefixplan analyze LOG --json FILE first, or pass --analysis FILE")
        newest = runs[0]
        path = newest.get("record_path")
        if path and Path(path).is_file():
            return load_record(path)
        summary = newest.get("summary") or {}
        return {
            "schema_version": 1,
            "tokenizer": summary.get("tokenizer"),
            "granularity": summary.get("granularity") or {},
            "candidates": store.analysis_candidates(int(newest["id"])),
        }


def store_token_lookup(db: str | None = None) -> Callable[[str], Sequence[int] | None]:
    """``key -> token ids`` from the store's versions (None when not stored)."""
    from prefixplan.keys import parse_key_ref

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


def record_from_store_keys(keys: Sequence[str], db: str | None = None) -> dict[str, Any]:
    """A minimal analysis record made of registered keys' stored token ids (for ``--keys``
    without an analysis)."""
    from prefixplan.store import open_store
    from prefixplan.keys import parse_key_ref

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
            cands.append({
                "rank": rank, "name": rec.name, "key": str(rec.key), "namespace": rec.namespace,
                "length": rec.token_count or (len(ids) if ids else 0), "token_ids": ids,
                "token_hash": rec.token_hash, "marginal_tokens": 0, "parent": None,
            })
    tok = {"fingerprint": fingerprint} if fingerprint else None
    return {"schema_version": 1, "tokenizer": tok, "granularity": {}, "candidates": cands}


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
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
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
        if any(k.lower() == "authorization" for k in headers):
            raise InputError(f"{where}.headers.Authorization: use api_key_env instead of a literal header")
        verify = r.get("verify_tls", True)
        if not isinstance(verify, (bool, str)):
            raise InputError(f"{where}.verify_tls: expected true, false or a CA bundle path")
        try:
            out.append(Endpoint(
                url=str(r["url"]), headers=tuple((str(k), str(v)) for k, v in headers.items()),
                api_key_env=r.get("api_key_env") or default_api_key_env, verify_tls=verify,
                name=str(r["name"]) if r.get("name") else None,
            ))
        except UsageError as err:
            raise InputError(f"{where}: {err}") from None
    return out
