"""Table family ``profiles``: prefill profiles measured by ``prefixplan calibrate``."""

from __future__ import annotations

import json
import time
from typing import Any

from prefixplan.errors import UsageError
from prefixplan.store.base import StoreBase, iso


class ProfilesMixin(StoreBase):
    """Stored prefill profiles (methods of :class:`~prefixplan.store.Store`)."""

    _PROFILE_COLS = ("name", "created", "endpoint", "model", "a_s", "b_s_per_token", "c_s_per_token2", "rmse_s", "r2")

    def save_profile(
        self,
        name: str,
        *,
        a_s: float,
        b_s_per_token: float,
        c_s_per_token2: float,
        endpoint: str | None = None,
        model: str | None = None,
        rmse_s: float | None = None,
        r2: float | None = None,
        samples: Any = None,
        created: str | None = None,
    ) -> None:
        """Store (or replace) the prefill profile ``name`` (``samples`` is stored as JSON)."""
        if not name or not name.strip():
            raise UsageError("a profile needs a non-empty name")
        row = (
            name,
            created or iso(time.time()),
            endpoint,
            model,
            float(a_s),
            float(b_s_per_token),
            float(c_s_per_token2),
            rmse_s,
            r2,
            json.dumps(samples) if samples is not None else None,
        )
        with self.write() as c:
            c.execute(
                "INSERT OR REPLACE INTO profiles(name, created, endpoint, model, a_s, b_s_per_token, "
                "c_s_per_token2, rmse_s, r2, samples) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )

    def get_profile(self, name: str) -> dict[str, Any] | None:
        """The stored profile ``name`` (``samples`` decoded), or None."""
        cur = self.conn.execute("SELECT * FROM profiles WHERE name = ?", (name,))
        r = cur.fetchone()
        if r is None:
            return None
        d = dict(zip([x[0] for x in cur.description], r, strict=True))
        d["samples"] = json.loads(d["samples"]) if d.get("samples") else None
        return d

    def profiles(self) -> list[dict[str, Any]]:
        """All stored profiles by name (without samples)."""
        cols = ", ".join(self._PROFILE_COLS)
        cur = self.conn.execute(f"SELECT {cols} FROM profiles ORDER BY name")
        return [dict(zip(self._PROFILE_COLS, r, strict=True)) for r in cur.fetchall()]
