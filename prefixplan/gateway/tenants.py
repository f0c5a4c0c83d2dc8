"""Who is asking: client keys, the tenants they belong to, and what each tenant may do.

Every key version has an *owner*. A client key maps to one tenant; a tenant owns the key names it
registers (its own namespace: two tenants may both have a ``support-bot``) and may read, besides
its own keys, the keys locked in the repository (owner :data:`LOCK`) and the keys another tenant
shares. The operator says who is who in a YAML file (``--tenants FILE``)::

    tenants:
      acme:
        key_hashes: ["sha256:..."]     # client keys, as SHA-256 hashes
        keys_env: ACME_KEYS            # and/or an env var holding keys, comma-separated
        register: true                 # may register key versions (default true)
        cache_salt_env: ACME_SALT      # the engines' cache_salt for every request (or cache_salt: TEXT)
        share: [faq-bot]               # acme's keys any tenant may expand (read-only)
        max_keys: 100                  # key names acme may own (default 1000)
      globex:
        keys_env: GLOBEX_KEYS
        register: false

Without a file, each client key (``--client-key-hash``/``--client-keys-env``) is a tenant of its
own that may register; with no client key at all the gateway is open and every client is the one
tenant :data:`OPEN` (nothing to tell clients apart by, so nothing is isolated but the locked keys).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixplan.errors import UsageError
from prefixplan.keys import NAME_RE

LOCK = "@lock"
"""Owner of the keys locked in the repository (``--recipes`` + ``--lock``): shared, read-only."""
OPEN = "@open"
"""The one tenant of a gateway without client keys."""
DEFAULT_MAX_KEYS = 1000
SALT_FIELD = "cache_salt"
"""The request field that isolates tenants in the engine's cache (vLLM's; SGLang reads ``extra_key``)."""

_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_TENANT_FIELDS = {"key_hashes", "keys_env", "register", "cache_salt", "cache_salt_env", "share", "max_keys"}


def hash_client_key(key: str) -> str:
    """``sha256:<hex>`` of a client API key (what ``--client-key-hash`` and ``key_hashes`` take)."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def _checked_hash(h: object, where: str) -> str:
    if not isinstance(h, str) or not _HASH.match(h):
        shown = str(h)[:20]
        raise UsageError(f"{where}: {shown}... is not a key hash", hint="expected sha256:<64 hex digits>")
    return h


def _env_keys(env: str, where: str, environ: Mapping[str, str]) -> set[str]:
    value = environ.get(env)
    if not value:
        raise UsageError(f"{where}: environment variable {env} is not set or empty")
    return {hash_client_key(k.strip()) for k in value.split(",") if k.strip()}


@dataclass(frozen=True, slots=True)
class Tenant:
    """One tenant: its client keys (hashes), rights, engine cache salt and shared key names."""

    name: str
    key_hashes: frozenset[str] = frozenset()
    register: bool = True
    cache_salt: str | None = None
    share: frozenset[str] = frozenset()
    max_keys: int = DEFAULT_MAX_KEYS


@dataclass(frozen=True, slots=True)
class Principal:
    """The tenant a request acts for, and which client key it came with (a short hash, for audit)."""

    tenant: str
    client: str
    register: bool = True
    cache_salt: str | None = None
    max_keys: int = DEFAULT_MAX_KEYS


OPEN_PRINCIPAL = Principal(OPEN, "-")


@dataclass(frozen=True, slots=True)
class Tenancy:
    """The tenants of a gateway, looked up by client key hash."""

    tenants: tuple[Tenant, ...] = ()
    salt_field: str = SALT_FIELD
    _by_hash: dict[str, Tenant] = field(default_factory=dict, init=False, repr=False, compare=False)
    _sharer: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for t in self.tenants:
            for h in t.key_hashes:
                other = self._by_hash.get(h)
                if other is not None and other.name != t.name:
                    raise UsageError(f"a client key belongs to two tenants ({other.name} and {t.name})")
                self._by_hash[h] = t
            for name in t.share:
                if name in self._sharer and self._sharer[name] != t.name:
                    raise UsageError(f"key {name} is shared by two tenants ({self._sharer[name]} and {t.name})")
                self._sharer[name] = t.name

    @property
    def open(self) -> bool:
        """No client key configured: every request is :data:`OPEN_PRINCIPAL`."""
        return not self._by_hash

    @property
    def key_hashes(self) -> frozenset[str]:
        return frozenset(self._by_hash)

    @property
    def salted(self) -> bool:
        return any(t.cache_salt for t in self.tenants)

    def principal(self, token: str | None) -> Principal | None:
        """The principal of a bearer token (None: not a known client key)."""
        if self.open:
            return OPEN_PRINCIPAL
        if not token:
            return None
        digest = hash_client_key(token)
        t = self._by_hash.get(digest)
        if t is None:
            return None
        return Principal(t.name, digest[7:19], t.register, t.cache_salt, t.max_keys)

    def sharer(self, name: str) -> str | None:
        """The tenant that shares key ``name`` with everyone (None: nobody does)."""
        return self._sharer.get(name)

    def salt_of(self, tenant: str) -> str | None:
        """The cache salt of ``tenant`` (None: unsalted, or not a tenant of the file)."""
        return next((t.cache_salt for t in self.tenants if t.name == tenant), None)


def tenancy_from_keys(hashes: Iterable[str]) -> Tenancy:
    """Each client key a tenant of its own (named ``key-<12 hex>``, may register)."""
    return Tenancy(tuple(Tenant(f"key-{h[7:19]}", frozenset({h})) for h in sorted(set(hashes))))


def _tenant(name: object, spec: object, where: str, environ: Mapping[str, str]) -> Tenant:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise UsageError(f"{where}: tenant name {str(name)[:40]!r} is not a valid name (letters, digits, . _ -)")
    here = f"{where}: tenant {name}"
    if not isinstance(spec, Mapping):
        raise UsageError(f"{here}: expected a mapping of settings")
    unknown = set(spec) - _TENANT_FIELDS
    if unknown:
        raise UsageError(f"{here}: unknown setting(s) {', '.join(sorted(map(str, unknown)))}")
    raw_hashes = spec.get("key_hashes") or []
    if not isinstance(raw_hashes, list):
        raise UsageError(f"{here}: key_hashes must be a list")
    hashes = {_checked_hash(h, here) for h in raw_hashes}
    if spec.get("keys_env"):
        hashes |= _env_keys(str(spec["keys_env"]), here, environ)
    if not hashes:
        raise UsageError(f"{here}: no client key (key_hashes or keys_env)")
    register = spec.get("register", True)
    if not isinstance(register, bool):
        raise UsageError(f"{here}: register must be true or false")
    salt = spec.get("cache_salt")
    if spec.get("cache_salt_env"):
        salt = environ.get(str(spec["cache_salt_env"]))
        if not salt:
            raise UsageError(f"{here}: environment variable {spec['cache_salt_env']} is not set or empty")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise UsageError(f"{here}: cache_salt must be a non-empty string")
    share = spec.get("share") or []
    if not isinstance(share, list) or not all(isinstance(s, str) and NAME_RE.match(s) for s in share):
        raise UsageError(f"{here}: share must be a list of key names")
    max_keys = spec.get("max_keys", DEFAULT_MAX_KEYS)
    if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
        raise UsageError(f"{here}: max_keys must be a positive integer")
    return Tenant(name, frozenset(hashes), register, salt, frozenset(share), max_keys)


def load_tenancy(path: str | Path, environ: Mapping[str, str] | None = None) -> Tenancy:
    """Read a tenants file (module docstring).

    Raises:
        UsageError: the file is missing, not YAML, or a setting is invalid.
    """
    import yaml

    from prefixplan.core import yamlsafe

    environ = os.environ if environ is None else environ
    where = str(path)
    try:
        data: Any = yamlsafe.load(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"{where}: cannot read the tenants file: {err.strerror or err}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise UsageError(f"{where}: invalid YAML: {str(err)[:200]}") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("tenants"), Mapping) or not data["tenants"]:
        raise UsageError(f"{where}: expected a 'tenants:' mapping of tenant name -> settings")
    unknown = set(data) - {"tenants", "salt_field"}
    if unknown:
        raise UsageError(f"{where}: unknown top-level setting(s) {', '.join(sorted(map(str, unknown)))}")
    salt_field = data.get("salt_field", SALT_FIELD)
    if salt_field not in ("cache_salt", "extra_key"):
        raise UsageError(f"{where}: salt_field must be cache_salt (vLLM) or extra_key (SGLang)")
    tenants = tuple(_tenant(n, s, where, environ) for n, s in data["tenants"].items())
    return Tenancy(tenants, salt_field=salt_field)
