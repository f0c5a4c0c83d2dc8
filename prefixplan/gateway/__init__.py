"""``prefixplan gateway``: an OpenAI-compatible proxy that expands ``prefix_key`` into the key's
exact parts, refuses a changed prefix under the same ``name@vN``, warms new versions on every
replica and routes requests to where their prefix is warm (docs/gateway.md).

Modules: ``config`` (what it is told), ``prefix`` (parts, hashing, expansion), ``keys`` (the
404/409/410 rules), ``state`` / ``redis_state`` (SQLite or Redis), ``warm`` (two-phase readiness),
``upstream`` (pooled clients, retries, usage), ``metrics`` (Prometheus), ``proxy`` (one request),
``app`` (routes, start-up), ``serve`` (uvicorn). The routing policies live in
:mod:`prefixplan.routing.policies`, shared with ``simulate --replicas``.
"""
