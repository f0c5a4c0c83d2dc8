"""Table family ``warm_runs``: one row per warm attempt (endpoint x key)."""

from __future__ import annotations

import json
import time
from typing import Any

from prefixplan.store.base import StoreBase, iso


class WarmRunsMixin(StoreBase):
    """Warm attempts (methods of :class:`~prefixplan.store.Store`)."""

    def record_warm_run(self, *, now: float | None = None, **fields: Any) -> int:
        """Store one warm attempt; known columns are filled, everything else goes to ``data``."""
        cols = (
            "endpoint",
            "key",
            "version",
            "tokens",
            "cold_ttft",
            "warm_ttft",
            "cached_tokens",
            "status",
            "error",
        )
        row = {k: fields.pop(k) for k in cols if k in fields}
        row["created"] = iso(time.time() if now is None else now)
        row["data"] = json.dumps(fields, default=str) if fields else None
        names = ", ".join(row)
        with self.write() as c:
            cur = c.execute(
                f"INSERT INTO warm_runs({names}) VALUES ({', '.join('?' for _ in row)})",
                tuple(row.values()),
            )
        return int(cur.lastrowid or 0)

    def warm_runs(self, key: str | None = None) -> list[dict[str, Any]]:
        """Warm runs, oldest first (optionally of one key)."""
        sql = "SELECT * FROM warm_runs"
        args: tuple[Any, ...] = ()
        if key is not None:
            sql += " WHERE key = ?"
            args = (key,)
        cur = self.conn.execute(sql + " ORDER BY id", args)
        names = [d[0] for d in cur.description]
        out = []
        for r in cur.fetchall():
            d = dict(zip(names, r, strict=True))
            d["data"] = json.loads(d["data"]) if d.get("data") else None
            out.append(d)
        return out
