"""The ``prefix_key`` rules: expand a key into its parts, or check / register a request's prefix.

* A request with ``prefix_key`` and no system/tools of its own is *expanded*: the key's version
  (``name@vN``, or the active version of a bare ``name``) must exist (else 404) and not be past
  its retention (else 410).
* A request with ``prefix_key`` and its own prefix is *checked*: its parts are hashed (pp1, as
  recipes and ``lock`` hash theirs) and compared with the version's. Equal: served as is. A
  ``name@vN`` not registered yet is registered (versions only go forward). Different content
  under a registered ``name@vN`` is refused (409) with the parts that changed; under a bare
  ``name`` it is refused too, unless ``--auto-version`` registers ``v(N+1)``.

Every check happens before the request is forwarded, never after. Errors are
:class:`GatewayError`, which the app turns into OpenAI-style error bodies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from prefixplan.errors import KeyConflictError, UsageError
from prefixplan.gateway.prefix import WirePart, comparable, diff_summary, wire_hash
from prefixplan.gateway.state import Backend, KeyVersion
from prefixplan.keys import DEFAULT_RETAIN_SECONDS, parse_key_ref

T = TypeVar("T")


class GatewayError(Exception):
    """An HTTP error the gateway answers with an OpenAI-style body."""

    def __init__(self, status: int, code: str, message: str, err_type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.err_type = err_type

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.err_type, "param": "prefix_key", "code": self.code}}


async def state_call(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` on the key state (SQLite or Redis) in a worker thread. A store that fails
    (Redis restarting, a locked or unwritable database) answers 503 ``state_unavailable``, naming
    the store and the error, instead of a bare 500; a key conflict stays a conflict."""
    try:
        return await asyncio.to_thread(fn, *args)
    except (GatewayError, KeyConflictError):
        raise
    except Exception as err:
        owner = getattr(fn, "__self__", None)
        where = type(owner).__name__ if owner is not None else "key state"
        raise GatewayError(
            503,
            "state_unavailable",
            f"the gateway's key state ({where}) failed: {type(err).__name__}: {err}",
            "server_error",
        ) from err


@dataclass(frozen=True, slots=True)
class Resolution:
    """The version a request uses; ``registered`` is set when this request registered it."""

    version: KeyVersion
    registered: bool = False
    note: str | None = None


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts is not None else "?"


class KeyService:
    """The rules of the module docstring over a :class:`~prefixplan.gateway.state.Backend`.

    Versions are cached for ``cache_s`` seconds (another gateway's registration is seen within
    that time); backend calls run in a worker thread, off the event loop.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        auto_version: bool = False,
        retain_seconds: int = DEFAULT_RETAIN_SECONDS,
        clock: Callable[[], float] = time.time,
        cache_s: float = 1.0,
    ) -> None:
        self.backend = backend
        self.auto_version = auto_version
        self.retain_seconds = retain_seconds
        self.clock = clock
        self.cache_s = cache_s
        self._cache: dict[tuple[str, int | None], tuple[float, KeyVersion | None]] = {}
        self._lock = asyncio.Lock()

    def parse(self, ref: object) -> tuple[str, int | None]:
        if not isinstance(ref, str):
            raise GatewayError(400, "invalid_prefix_key", "prefix_key must be a string: name or name@vN")
        try:
            return parse_key_ref(ref)
        except UsageError as err:
            raise GatewayError(
                400, "invalid_prefix_key", f"{err}; expected name or name@vN, e.g. support-bot@v3"
            ) from None

    async def lookup(self, name: str, version: int | None) -> KeyVersion | None:
        now = time.monotonic()
        hit = self._cache.get((name, version))
        if hit is not None and now - hit[0] < self.cache_s:
            return hit[1]
        kv = await state_call(self.backend.get, name, version)
        self._cache[(name, version)] = (now, kv)
        return kv

    def _forget(self, name: str) -> None:
        for k in [k for k in self._cache if k[0] == name]:
            del self._cache[k]

    def _check_alive(self, kv: KeyVersion) -> None:
        if kv.expired(self.clock()):
            raise GatewayError(
                410,
                "prefix_key_expired",
                f"prefix key {kv.key} expired on {_when(kv.retain_until)} (superseded, past its retention of "
                f"{kv.retain_seconds}s): send prefix_key '{kv.name}' for the active version, or register a new "
                "version with the full prefix",
            )

    async def expand_target(self, ref: object) -> KeyVersion:
        """The version a key-only request expands to (404 unknown, 410 expired)."""
        name, version = self.parse(ref)
        kv = await self.lookup(name, version)
        if kv is None:
            what = f"{name}@v{version}" if version is not None else name
            raise GatewayError(
                404,
                "prefix_key_not_found",
                f"prefix key {what} is not registered: send one request with prefix_key and the full prefix "
                "(system messages and tools) to register it, or declare it in recipes/ and prefixplan.lock",
            )
        self._check_alive(kv)
        return kv

    async def check_or_register(self, ref: object, parts: Sequence[WirePart], *, source: str = "gateway") -> Resolution:
        """Compare a request's own prefix with the key's version, registering it when new."""
        name, version = self.parse(ref)
        new_hash = wire_hash(parts)
        async with self._lock:  # one registration at a time in this gateway; the backend is atomic across them
            kv = await self.lookup(name, version)
            if kv is not None:
                self._check_alive(kv)
                if wire_hash(comparable(kv.parts)) == new_hash:
                    return Resolution(kv)
                changed = diff_summary(comparable(kv.parts), parts)
                if version is not None:
                    raise GatewayError(
                        409,
                        "prefix_key_conflict",
                        f"prefix key {kv.key} is registered with other content ({changed}); a changed prefix needs "
                        f"a new version: send {name}@v{await self._next(name)} with the full prefix",
                    )
                if not self.auto_version:
                    raise GatewayError(
                        409,
                        "prefix_key_conflict",
                        f"the active version {kv.key} of prefix key {name} has other content ({changed}); send "
                        f"{name}@v{await self._next(name)} with the full prefix to register it (or run the gateway "
                        "with --auto-version)",
                    )
                version = await self._next(name)
                note = f"{name}@v{version} registered: the prefix differs from {kv.key} ({changed}); --auto-version"
            else:
                if version is None:
                    version = await self._next(name)
                else:
                    last = await state_call(self.backend.last_version, name)
                    if version <= last:
                        raise GatewayError(
                            409,
                            "prefix_key_conflict",
                            f"{name}@v{version} cannot be registered: versions only go forward and {name} is at "
                            f"v{last}; send {name}@v{last + 1}",
                        )
                note = f"{name}@v{version} registered"
            candidate = KeyVersion(
                name=name,
                version=version,
                content_hash=new_hash,
                wire_hash=new_hash,
                parts=tuple(parts),
                retain_seconds=self.retain_seconds,
                source=source,
            )
            try:
                stored, created = await state_call(self.backend.register, candidate)
            except KeyConflictError as err:  # the store holds name@vN from elsewhere (lock, analyze)
                raise GatewayError(409, "prefix_key_conflict", f"{err}; {err.hint or 'bump the version'}") from None
            self._forget(name)
            if not created and stored.wire_hash != new_hash:  # another gateway registered it first
                raise GatewayError(
                    409,
                    "prefix_key_conflict",
                    f"prefix key {stored.key} was just registered with other content "
                    f"({diff_summary(comparable(stored.parts), parts)}); bump the version",
                )
            return Resolution(stored, registered=created, note=note if created else None)

    async def _next(self, name: str) -> int:
        return int(await state_call(self.backend.last_version, name)) + 1
