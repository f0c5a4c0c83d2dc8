"""``prefixplan gateway``: an OpenAI-compatible proxy that expands ``prefix_key`` into the key's
exact parts, refuses a changed prefix under the same ``name@vN``, warms new versions on every
replica and routes requests to where their prefix is warm (docs/gateway.md).

Modules: ``config`` (what it is told), ``tenants`` (who asks, and what they may do), ``prefix``
(parts, hashing, expansion), ``rules`` (the prefix_key rules: 403/404/409/410), ``state`` /
``redis_state`` (SQLite or Redis), ``ledger`` (a lost state noticed and healed), ``warm``
(two-phase readiness), ``bodies`` and ``protocol`` (bounded clients), ``upstream`` (pooled
clients, retries, usage, redaction), ``metrics`` (Prometheus), ``proxy`` (one request), ``app``
(routes, start-up), ``serve`` (uvicorn). The routing policies live in
:mod:`prefixplan.routing.policies`, shared with ``simulate --replicas``.
"""
