"""Live cache truth: what each replica holds, learned from the engines' KV events.

Modules: ``decode`` (both event encodings of the msgpack payloads), ``chain`` (prefixplan's own
block key, computed from the token ids an event carries), ``index`` (resident blocks per replica,
medium and cache group, and the queries the gateway asks), ``stream`` (one replica's sequence:
duplicates, reordering, gaps healed through the replay endpoint, resyncs, restarts),
``subscriber`` (the ZMQ sockets and their thread), ``metrics`` (Prometheus). Needs the
``events`` extra (pyzmq, msgpack).
"""
