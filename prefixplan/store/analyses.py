"""Table family ``analyses`` / ``analysis_candidates``: one row per analyze run and its ranked candidates."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from prefixplan.store.base import StoreBase, iso


class AnalysesMixin(StoreBase):
    """Analysis runs (methods of :class:`~prefixplan.store.Store`)."""

    def record_analysis(
        self,
        summary: dict[str, Any],
        candidates: Sequence[dict[str, Any]],
        log_paths: Sequence[str],
        record_path: str | None,
        *,
        now: float | None = None,
    ) -> int:
        """Store one analysis run and its ranked candidates; return the analysis id.

        Each candidate dict is stored whole as JSON; ``key``, ``kind``, ``token_count`` (or
        ``tokens``) and ``content_hash`` are also copied into columns when present.
        """
        created = iso(time.time() if now is None else now)
        with self.write() as c:
            cur = c.execute(
                "INSERT INTO analyses(created, log_paths, summary, record_path) VALUES (?, ?, ?, ?)",
                (
                    created,
                    json.dumps(list(map(str, log_paths))),
                    json.dumps(summary, default=str),
                    record_path,
                ),
            )
            aid = int(cur.lastrowid or 0)
            for rank, cand in enumerate(candidates, start=1):
                c.execute(
                    "INSERT INTO analysis_candidates(analysis_id, rank, key, kind, token_count, "
                    "content_hash, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        aid,
                        int(cand.get("rank", rank)),
                        cand.get("key"),
                        cand.get("kind"),
                        cand.get("token_count", cand.get("tokens")),
                        cand.get("content_hash"),
                        json.dumps(cand, default=str),
                    ),
                )
        return aid

    def analyses(self) -> list[dict[str, Any]]:
        """All analyses, newest first (summary decoded)."""
        rows = self.conn.execute(
            "SELECT id, created, log_paths, summary, record_path FROM analyses ORDER BY id DESC"
        ).fetchall()
        return [
            {
                "id": r[0],
                "created": r[1],
                "log_paths": json.loads(r[2]),
                "summary": json.loads(r[3]),
                "record_path": r[4],
            }
            for r in rows
        ]

    def analysis_candidates(self, analysis_id: int) -> list[dict[str, Any]]:
        """Candidates of one analysis in rank order (the stored dicts)."""
        rows = self.conn.execute(
            "SELECT data FROM analysis_candidates WHERE analysis_id = ? ORDER BY rank", (analysis_id,)
        ).fetchall()
        return [json.loads(r[0]) for r in rows]
