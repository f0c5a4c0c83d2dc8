"""The ``prefix_key`` rules: expand a key into its parts, or check / register a request's prefix,
always on behalf of a tenant (:class:`~prefixplan.gateway.tenants.Principal`).

A name resolves, for a tenant, to the key locked in the repository when one has that name, else to
the key another tenant shares under it, else to the tenant's own key: locked and shared names are
read-only to everyone but their owner (the lock: only a new lock, i.e. CI, changes them), and a
tenant never sees, expands or registers another tenant's private keys (their names answer 404,
exactly as names nobody has).

* A request with ``prefix_key`` and no system/tools of its own is *expanded*: the key's version
  (``name@vN``, or the active version of a bare ``name``) must exist (else 404) and not be past
  its retention (else 410).
* A request with ``prefix_key`` and its own prefix is *checked*: its parts are hashed (pp1, as
  recipes and ``lock`` hash theirs) and compared with the version's. Equal: served as is. A new
  ``name@vN`` of the tenant's own is registered when N is one above the highest so far (versions
  grow by one), if the tenant may register and has not reached its number of names. Different
  content under a registered ``name@vN`` is refused (409) with the parts that changed (and where,
  for the owner only); under a bare ``name`` it is refused too, unless ``--auto-version``
  registers ``v(N+1)``. Different content under a read-only name is refused (403).

Every check happens before the request is forwarded, never after. Errors are
:class:`GatewayError`, which the app turns into OpenAI-style error bodies; they quote at most
:data:`SHOWN` characters of any value a client sent.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from prefixplan.errors import KeyConflictError
from prefixplan.gateway.prefix import WirePart, comparable, diff_summary, wire_hash
from prefixplan.gateway.state import Backend, KeyVersion, StateLost
from prefixplan.gateway.tenants import LOCK, Principal, Tenancy
from prefixplan.keys import DEFAULT_RETAIN_SECONDS, MAX_VERSION, NAME_RE

if TYPE_CHECKING:  # pragma: no cover
    from prefixplan.gateway.ledger import Ledger, StateWatch

T = TypeVar("T")
SHOWN = 64
"""Characters of a client's value an error message may quote."""
CACHE_SIZE = 4096
"""Lookups remembered (unknown names included): the memory a flood of made-up names can take."""
DIFF_OFF_LOOP = 64 * 1024
"""Prefixes larger than this (bytes of all parts) are compared in a worker thread."""


def shown(value: object) -> str:
    """``value`` quoted for an error message: at most :data:`SHOWN` characters."""
    text = value if isinstance(value, str) else repr(value)
    return repr(text) if len(text) <= SHOWN else repr(text[:SHOWN]) + f"... ({len(text)} characters)"


class GatewayError(Exception):
    """An HTTP error the gateway answers with an OpenAI-style body."""

    def __init__(self, status: int, code: str, message: str, err_type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.err_type = err_type
        self.headers: dict[str, str] = {}

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.err_type, "param": "prefix_key", "code": self.code}}


async def state_call(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` on the key state (SQLite or Redis) in a worker thread. A store that fails
    (Redis restarting, a locked or unwritable database) answers 503 ``state_unavailable``, naming
    the store and the error, instead of a bare 500; a key conflict stays a conflict."""
    try:
        return await asyncio.to_thread(fn, *args)
    except (GatewayError, KeyConflictError, StateLost):
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


def _not_found(name: str, version: int | None) -> GatewayError:
    what = f"{name}@v{version}" if version is not None else name
    return GatewayError(
        404,
        "prefix_key_not_found",
        f"prefix key {what} is not registered: send one request with prefix_key and the full prefix "
        "(system messages and tools) to register it, or declare it in recipes/ and prefixplan.lock",
    )


def _size(parts: Sequence[WirePart]) -> int:
    return sum(len(p.data) for p in parts)


class KeyService:
    """The rules of the module docstring over a :class:`~prefixplan.gateway.state.Backend`.

    Lookups are cached for ``cache_s`` seconds (another gateway's registration is seen within that
    time), at most :data:`CACHE_SIZE` of them; backend calls run in a worker thread, off the event
    loop. ``locked`` holds the names of the keys locked in the repository.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        tenancy: Tenancy | None = None,
        auto_version: bool = False,
        retain_seconds: int = DEFAULT_RETAIN_SECONDS,
        clock: Callable[[], float] = time.time,
        cache_s: float = 1.0,
        cache_size: int = CACHE_SIZE,
        ledger: Ledger | None = None,
        watch: StateWatch | None = None,
    ) -> None:
        self.backend = backend
        self.tenancy = tenancy or Tenancy()
        self.auto_version = auto_version
        self.retain_seconds = retain_seconds
        self.clock = clock
        self.cache_s = cache_s
        self.cache_size = cache_size
        self.ledger = ledger
        self.watch = watch
        self.locked: frozenset[str] = frozenset()
        self._cache: OrderedDict[tuple[str, str, int | None], tuple[float, KeyVersion | None]] = OrderedDict()
        self._lock = asyncio.Lock()

    def parse(self, ref: object) -> tuple[str, int | None]:
        """``name`` or ``name@vN`` (400 otherwise, quoting at most :data:`SHOWN` characters)."""
        if not isinstance(ref, str):
            raise GatewayError(400, "invalid_prefix_key", "prefix_key must be a string: name or name@vN")
        text = ref.strip()
        name, at, tail = text.partition("@")
        version: int | None = None
        if at:
            digits = tail[1:]
            if not (tail.startswith("v") and digits.isdigit() and digits[0] != "0" and len(digits) <= 9):
                name = ""
            else:
                version = int(digits)
        if not name or not NAME_RE.match(name) or (version is not None and not 1 <= version <= MAX_VERSION):
            raise GatewayError(
                400,
                "invalid_prefix_key",
                f"invalid prefix_key {shown(ref)}: expected name or name@vN (letters, digits, '.', '_', '-'; "
                "N from 1), e.g. support-bot@v3",
            )
        return name, version

    def owner_of(self, principal: Principal, name: str) -> tuple[str, bool]:
        """Whose ``name`` a tenant means, and whether it is read-only to the tenant."""
        if name in self.locked:
            return LOCK, principal.tenant != LOCK
        sharer = self.tenancy.sharer(name)
        if sharer is not None and sharer != principal.tenant:
            return sharer, True
        return principal.tenant, False

    async def lookup(self, owner: str, name: str, version: int | None) -> KeyVersion | None:
        now = time.monotonic()
        ident = (owner, name, version)
        hit = self._cache.get(ident)
        if hit is not None and now - hit[0] < self.cache_s:
            return hit[1]
        kv = await state_call(self.backend.get, owner, name, version)
        if kv is None and self.watch is not None and self.ledger is not None:
            # A name this gateway has seen is unknown: the state may have been lost. Heal, look again.
            seen = await asyncio.to_thread(self.ledger.seen, owner, name)
            if seen and await self.watch.check():
                kv = await state_call(self.backend.get, owner, name, version)
        self._cache[ident] = (now, kv)
        self._cache.move_to_end(ident)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        if kv is not None:
            await self._note(kv)
        return kv

    async def _note(self, kv: KeyVersion) -> None:
        if self.ledger is not None and not self.ledger.has(kv):
            await asyncio.to_thread(self.ledger.note, kv)

    def forget(self, owner: str | None = None, name: str | None = None) -> None:
        """Drop cached lookups (of one name, or all)."""
        if owner is None:
            self._cache.clear()
            return
        for k in [k for k in self._cache if k[0] == owner and k[1] == name]:
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

    async def expand_target(self, principal: Principal, ref: object) -> KeyVersion:
        """The version a key-only request of ``principal`` expands to (404 unknown or not theirs,
        410 expired)."""
        name, version = self.parse(ref)
        owner, _ = self.owner_of(principal, name)
        kv = await self.lookup(owner, name, version)
        if kv is None:
            raise _not_found(name, version)
        self._check_alive(kv)
        return kv

    async def _diff(self, old: Sequence[WirePart], new: Sequence[WirePart], positions: bool) -> str:
        if _size(old) + _size(new) > DIFF_OFF_LOOP or len(old) + len(new) > 256:
            return await asyncio.to_thread(lambda: diff_summary(old, new, positions=positions))
        return diff_summary(old, new, positions=positions)

    async def _next(self, owner: str, name: str) -> int:
        last = int(await state_call(self.backend.last_version, owner, name))
        if self.ledger is not None:
            last = max(last, await asyncio.to_thread(self.ledger.last, owner, name))
        return last + 1

    async def check_or_register(
        self, principal: Principal, ref: object, parts: Sequence[WirePart], *, source: str = "gateway"
    ) -> Resolution:
        """Compare a request's own prefix with the key's version, registering it when new. A
        registration refused because the state was lost heals the state and is tried once more."""
        for attempt in (0, 1):
            try:
                return await self._check_or_register(principal, ref, parts, source)
            except StateLost:
                if self.watch is None or attempt:
                    raise GatewayError(
                        503,
                        "state_reset",
                        "the gateway's key state was lost and is being restored: send the request again",
                        "server_error",
                    ) from None
                await self.watch.check()
                self.forget()
        raise AssertionError("unreachable")

    async def _check_or_register(
        self, principal: Principal, ref: object, parts: Sequence[WirePart], source: str
    ) -> Resolution:
        name, version = self.parse(ref)
        owner, read_only = self.owner_of(principal, name)
        new_hash = wire_hash(parts) if _size(parts) <= DIFF_OFF_LOOP else await asyncio.to_thread(wire_hash, parts)
        async with self._lock:  # one registration at a time in this gateway; the backend is atomic across them
            kv = await self.lookup(owner, name, version)
            if kv is not None:
                self._check_alive(kv)
                if kv.wire_hash == new_hash or wire_hash(comparable(kv.parts)) == new_hash:
                    return Resolution(kv)
            if read_only:
                what = "locked in the repository" if owner == LOCK else "shared read-only by its owner"
                changed = f" ({await self._diff(comparable(kv.parts), parts, False)})" if kv is not None else ""
                raise GatewayError(
                    403,
                    "prefix_key_read_only",
                    f"prefix key {name} is {what}: it cannot be registered or changed here{changed}; send it "
                    "without system messages and tools to use it, or register your prefix under another name",
                    "permission_error",
                )
            if not principal.register:
                raise GatewayError(
                    403,
                    "registration_not_allowed",
                    "this client may use prefix keys but not register them: send the key without system "
                    "messages and tools, or ask the operator for the register right",
                    "permission_error",
                )
            note = None
            if kv is not None:
                changed = await self._diff(comparable(kv.parts), parts, True)
                nxt = await self._next(owner, name)
                if version is not None or not self.auto_version:
                    head = (
                        f"prefix key {kv.key} is registered with other content"
                        if version is not None
                        else f"the active version {kv.key} of prefix key {name} has other content"
                    )
                    tail = "" if version is not None else " (or run the gateway with --auto-version)"
                    raise GatewayError(
                        409,
                        "prefix_key_conflict",
                        f"{head} ({changed}); a changed prefix needs a new version: send {name}@v{nxt} with "
                        f"the full prefix{tail}",
                    )
                version = nxt
                note = f"{name}@v{version} registered: the prefix differs from {kv.key} ({changed}); --auto-version"
            else:
                nxt = await self._next(owner, name)
                if version is None:
                    version = nxt
                elif version != nxt:
                    raise GatewayError(
                        409,
                        "prefix_key_conflict",
                        f"{name}@v{version} cannot be registered: versions grow by one and {name} is at "
                        f"v{nxt - 1}; send {name}@v{nxt}",
                    )
                if nxt == 1 and await state_call(self.backend.name_count, owner) >= principal.max_keys:
                    raise GatewayError(
                        403,
                        "prefix_key_limit",
                        f"this tenant has {principal.max_keys} prefix key names, its limit: reuse a name "
                        "(a new version of it) or ask the operator to raise max_keys",
                        "permission_error",
                    )
            return await self._register(principal, owner, name, version, parts, new_hash, source, note)

    async def _register(
        self,
        principal: Principal,
        owner: str,
        name: str,
        version: int,
        parts: Sequence[WirePart],
        new_hash: str,
        source: str,
        note: str | None,
    ) -> Resolution:
        if self.ledger is not None:
            known = await asyncio.to_thread(self.ledger.known, owner, name, version)
            if known is not None and known.wire_hash != new_hash:
                nxt = max(version, await asyncio.to_thread(self.ledger.last, owner, name)) + 1
                raise GatewayError(
                    409,
                    "prefix_key_conflict",
                    f"{name}@v{version} was registered with other content before the key state was lost; "
                    f"a version number keeps its content: send {name}@v{nxt}",
                )
        candidate = KeyVersion(
            name=name,
            version=version,
            content_hash=new_hash,
            wire_hash=new_hash,
            parts=tuple(parts),
            retain_seconds=self.retain_seconds,
            source=source,
            owner=owner,
        )
        epoch = self.watch.epoch if self.watch is not None else None
        entry = {
            "ts": self.clock(),
            "tenant": principal.tenant,
            "client": principal.client,
            "event": "registered",
            "key": candidate.label,
            "content_hash": new_hash,
            "detail": source,
        }
        try:
            stored, created = await state_call(self.backend.register, candidate, epoch, entry)
        except KeyConflictError as err:
            raise GatewayError(409, "prefix_key_conflict", f"{err}; {err.hint or 'bump the version'}") from None
        self.forget(owner, name)
        if not created and stored.wire_hash != new_hash:  # another gateway registered it first
            raise GatewayError(
                409,
                "prefix_key_conflict",
                f"prefix key {stored.key} was just registered with other content "
                f"({await self._diff(comparable(stored.parts), parts, True)}); bump the version",
            )
        await self._note(stored)
        return Resolution(
            stored, registered=created, note=(note or f"{name}@v{version} registered") if created else None
        )
