"""``--state redis://HOST:PORT/DB``: key versions, warm state and counters shared through Redis.

Layout (prefix ``prefixplan:gw:``):

==============================  ======  =====================================================
key                             type    holds
==============================  ======  =====================================================
``versions:{name}``             hash    field ``N`` -> the version as JSON (:class:`KeyVersion`)
``active:{name}``               string  the active version number
``last:{name}``                 string  the highest number ever registered
``warm:{name@vN}``              hash    replica label -> warm status; ``*`` -> fleet status
``stats:{key}``                 hash    ``{replica}|{counter}`` -> count (HINCRBY)
==============================  ======  =====================================================

Registration is one optimistic transaction (``WATCH`` the name's keys, ``MULTI``/``EXEC``, retry
on a concurrent change), so two gateways registering the same ``name@vN`` store it once. A URL's
password, if any, is never printed: messages show the URL through :func:`display_url`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from prefixplan.core.urls import display_url
from prefixplan.errors import UsageError
from prefixplan.gateway.state import KeyVersion, supersede
from prefixplan.store.gateway import KeyStats

PREFIX = "prefixplan:gw:"


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

    def get(self, name: str, version: int | None) -> KeyVersion | None:
        if version is None:
            active = self._r.get(f"{PREFIX}active:{name}")
            if active is None:
                return None
            version = int(active)
        raw = self._r.hget(f"{PREFIX}versions:{name}", str(version))
        return self._decode(raw) if raw is not None else None

    def last_version(self, name: str) -> int:
        raw = self._r.get(f"{PREFIX}last:{name}")
        return int(raw) if raw is not None else 0

    def register(self, kv: KeyVersion) -> tuple[KeyVersion, bool]:
        versions, active_key, last_key = (f"{PREFIX}{k}:{kv.name}" for k in ("versions", "active", "last"))
        with self._r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(versions, active_key, last_key)
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
                    pipe.execute()
                    return rec, True
                except self._watch_error:
                    continue

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
