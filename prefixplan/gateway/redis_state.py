"""``--state redis://HOST:PORT/DB``: key versions, warm state and counters shared through Redis.

Layout (prefix ``prefixplan:gw:``):

==============================  ======  =====================================================
key                             type    holds
==============================  ======  =====================================================
``versions:{owner}/{name}``     hash    field ``N`` -> the version as JSON (:class:`KeyVersion`)
``active:{owner}/{name}``       string  the active version number
``last:{owner}/{name}``         string  the highest number ever registered
``names:{owner}``               set     the owner's names (the per-tenant limit counts them)
``warm:{label}``                hash    replica label -> warm status; ``*`` -> fleet status
``stats:{label}``               hash    ``{replica}|{counter}`` -> count (HINCRBY)
``epoch``                       string  the state's epoch (set once, ``SET NX``)
``audit``                       stream  registrations (who, when, which hash), capped
==============================  ======  =====================================================

Registration is one optimistic transaction (``WATCH`` the name's keys and the epoch,
``MULTI``/``EXEC``, retry on a concurrent change), so two gateways registering the same
``name@vN`` store it once, and none registers into a state that was wiped since it last looked
(the epoch changed: :class:`~prefixplan.gateway.state.StateLost`). A URL's password, if any, is
never printed: messages show the URL through :func:`display_url`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from prefixplan.core.urls import display_url
from prefixplan.errors import UsageError
from prefixplan.gateway.state import KeyVersion, StateLost, supersede
from prefixplan.store.gateway_tables import AUDIT_FIELDS, KeyStats

PREFIX = "prefixplan:gw:"
AUDIT_MAXLEN = 100_000


def _audit_fields(entry: Mapping[str, object]) -> dict[str, str]:
    return {f: "" if entry.get(f) is None else str(entry.get(f)) for f in AUDIT_FIELDS}


class RedisBackend:
    """The :class:`~prefixplan.gateway.state.Backend` on a Redis server."""

    def __init__(self, url: str, clock: Callable[[], float] = time.time) -> None:
        from prefixplan.core.extras import require

        redis = require("redis", "gateway")
        self._clock = clock
        self.url = display_url(url)
        try:
            self._r = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
            self._r.ping()
        except (redis.RedisError, ValueError) as err:
            raise UsageError(
                f"cannot use --state {self.url}: {err}", hint="start redis-server or fix the URL"
            ) from None
        self._watch_error = redis.WatchError

    def _decode(self, raw: Any) -> KeyVersion:
        return KeyVersion.from_json(json.loads(raw))

    @staticmethod
    def _keys(owner: str, name: str) -> tuple[str, str, str]:
        return tuple(f"{PREFIX}{k}:{owner}/{name}" for k in ("versions", "active", "last"))  # type: ignore[return-value]

    def get(self, owner: str, name: str, version: int | None) -> KeyVersion | None:
        versions, active_key, _ = self._keys(owner, name)
        if version is None:
            active = self._r.get(active_key)
            if active is None:
                return None
            version = int(active)
        raw = self._r.hget(versions, str(version))
        return self._decode(raw) if raw is not None else None

    def last_version(self, owner: str, name: str) -> int:
        raw = self._r.get(self._keys(owner, name)[2])
        return int(raw) if raw is not None else 0

    def name_count(self, owner: str) -> int:
        return int(self._r.scard(f"{PREFIX}names:{owner}"))

    def register(
        self, kv: KeyVersion, epoch: str | None = None, audit: Mapping[str, object] | None = None
    ) -> tuple[KeyVersion, bool]:
        versions, active_key, last_key = self._keys(kv.owner, kv.name)
        epoch_key = f"{PREFIX}epoch"
        with self._r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(versions, active_key, last_key, epoch_key)
                    if epoch is not None:
                        found = pipe.get(epoch_key)
                        if found is None or found.decode() != epoch:
                            pipe.unwatch()
                            raise StateLost(f"the state's epoch is {found!r}, not {epoch}")
                    raw = pipe.hget(versions, str(kv.version))
                    if raw is not None:
                        pipe.unwatch()
                        return self._decode(raw), False
                    active = pipe.get(active_key)
                    old = self._decode(pipe.hget(versions, active.decode())) if active is not None else None
                    last = int(pipe.get(last_key) or 0)
                    now = self._clock()
                    newer = old is None or kv.version > old.version
                    rec = replace(kv, status="active", retain_until=None) if newer else supersede(kv, now)
                    pipe.multi()
                    if newer and old is not None:
                        pipe.hset(versions, str(old.version), json.dumps(supersede(old, now).to_json()))
                    pipe.hset(versions, str(kv.version), json.dumps(rec.to_json()))
                    if newer:
                        pipe.set(active_key, str(kv.version))
                    pipe.set(last_key, str(max(last, kv.version)))
                    pipe.sadd(f"{PREFIX}names:{kv.owner}", kv.name)
                    if audit is not None:
                        pipe.xadd(f"{PREFIX}audit", _audit_fields(audit), maxlen=AUDIT_MAXLEN, approximate=True)
                    pipe.execute()
                    return rec, True
                except self._watch_error:
                    continue

    def restore(self, kv: KeyVersion) -> bool:
        versions, active_key, last_key = self._keys(kv.owner, kv.name)
        if not self._r.hsetnx(versions, str(kv.version), json.dumps(kv.to_json())):
            return False
        with self._r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(active_key, last_key)
                    active = pipe.get(active_key)
                    last = int(pipe.get(last_key) or 0)
                    pipe.multi()
                    if kv.status == "active" and (active is None or int(active) < kv.version):
                        pipe.set(active_key, str(kv.version))
                    pipe.set(last_key, str(max(last, kv.version)))
                    pipe.sadd(f"{PREFIX}names:{kv.owner}", kv.name)
                    pipe.execute()
                    return True
                except self._watch_error:
                    continue

    def epoch(self, create: str | None = None) -> str | None:
        key = f"{PREFIX}epoch"
        if create is not None:
            self._r.set(key, create, nx=True)
        raw = self._r.get(key)
        return raw.decode() if raw is not None else None

    def audit(self, entry: Mapping[str, object]) -> None:
        self._r.xadd(f"{PREFIX}audit", _audit_fields(entry), maxlen=AUDIT_MAXLEN, approximate=True)

    def audit_rows(self, limit: int = 1000) -> list[dict[str, str]]:
        """The latest ``limit`` audit entries, oldest first."""
        rows = self._r.xrevrange(f"{PREFIX}audit", count=limit)
        return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in reversed(rows)]

    def set_warm(self, key: str, states: Mapping[str, str]) -> None:
        if states:
            self._r.hset(f"{PREFIX}warm:{key}", mapping=dict(states))

    def warm(self, key: str) -> dict[str, str]:
        raw = self._r.hgetall(f"{PREFIX}warm:{key}")
        return {k.decode(): v.decode() for k, v in raw.items()}

    def add_stats(self, rows: Iterable[KeyStats]) -> None:
        pipe = self._r.pipeline(transaction=False)
        n = 0
        for r in rows:
            h = f"{PREFIX}stats:{r.key}"
            for field in ("requests", "errors", "prompt_tokens", "cached_tokens", "ttft_count"):
                value = int(getattr(r, field))
                if value:
                    pipe.hincrby(h, f"{r.replica}|{field}", value)
            if r.ttft_sum_s:
                pipe.hincrbyfloat(h, f"{r.replica}|ttft_sum_s", r.ttft_sum_s)
            n += 1
        if n:
            pipe.execute()

    def close(self) -> None:
        self._r.close()
