"""Concurrent writers and kill -9 during writes leave the store complete and consistent."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from prefixplan.errors import KeyConflictError
from prefixplan.keys import content_hash, token_hash, token_ids_from_bytes
from prefixplan.store import open_store

N_PROCS = 6
PER_PROC = 15


def _h(text: str) -> str:
    return content_hash([("system", text.encode())])


def _worker(db: str, wid: int, queue: mp.Queue) -> None:  # type: ignore[type-arg]
    conflicts = 0
    with open_store(db) as s:
        for i in range(PER_PROC):
            # distinct content: every call must create exactly one new version
            s.record_version("shared", content_hash=_h(f"w{wid}-{i}"), kind="system", source=f"w{wid}")
            # identical content from every process: exactly one version overall
            s.record_version("same", content_hash=_h("identical"), kind="system", source=f"w{wid}")
        try:
            s.record_version("explicit", version=1, content_hash=_h(f"mine-{wid}"), kind="system", source=f"w{wid}")
        except KeyConflictError:
            conflicts += 1
    queue.put(conflicts)


def test_concurrent_writers_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "conc.db")
    open_store(db).close()  # schema first, so workers race on data, not only on migrations
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(db, w, queue)) for w in range(N_PROCS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    conflicts = sum(queue.get(timeout=10) for _ in procs)
    with open_store(db) as s:
        rows = s.versions("shared")
        assert sorted(r.version for r in rows) == list(range(1, N_PROCS * PER_PROC + 1))
        assert {r.content_hash for r in rows} == {_h(f"w{w}-{i}") for w in range(N_PROCS) for i in range(PER_PROC)}
        assert [r.status for r in rows].count("active") == 1 and rows[-1].status == "active"
        assert len(s.versions("same")) == 1
        assert len(s.versions("explicit")) == 1 and conflicts == N_PROCS - 1
        assert s.integrity_check() == "ok"


def test_concurrent_first_open_migrates_once(tmp_path: Path) -> None:
    db = str(tmp_path / "fresh.db")
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(db, w, queue)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    import sqlite3

    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM _sqlite_migrations").fetchone()[0] == 4  # each migration once
    assert conn.execute("SELECT count(*) FROM versions WHERE name = 'shared'").fetchone()[0] == 4 * PER_PROC


WRITER = r"""
import sys
import numpy as np
from prefixplan.keys import content_hash, token_hash
from prefixplan.store import open_store
s = open_store(sys.argv[1])
rng = np.random.default_rng(int(sys.argv[2]))
i = 0
while True:
    ids = rng.integers(0, 150000, size=int(rng.integers(20000, 120000)), dtype=np.uint32)
    s.record_version("big", content_hash=content_hash([("system", ids.tobytes())]), kind="system",
                     source="killtest", token_ids=ids, token_hash=token_hash("fp", ids), tokenizer_fingerprint="fp")
    s.record_analysis({"i": i}, [{"rank": r, "kind": "system"} for r in range(1, 30)], ["x.jsonl"], None)
    i += 1
    if i == 3:
        print("ready", flush=True)
"""


def test_kill_9_during_writes_leaves_consistent_db(tmp_path: Path) -> None:
    db = str(tmp_path / "kill.db")
    open_store(db).close()
    for round_ in range(4):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, db, str(round_)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.05 + 0.07 * round_)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert proc.returncode == -signal.SIGKILL
    with open_store(db) as s:
        assert s.integrity_check() == "ok"
        rows = s.versions("big")
        assert len(rows) >= 12
        assert [r.version for r in rows] == list(range(1, len(rows) + 1))
        assert [r.status for r in rows].count("active") == 1
        for r in rows:  # no half-written version: every row's blob matches its own hashes
            blob = s.conn.execute(
                "SELECT token_ids FROM versions WHERE name='big' AND version=?", (r.version,)
            ).fetchone()[0]
            ids = token_ids_from_bytes(blob)
            assert r.token_count == len(ids)
            assert r.token_hash == token_hash("fp", ids)
            assert r.content_hash == content_hash([("system", blob)])
        # every analysis has all of its candidates (one transaction each)
        counts = s.conn.execute(
            "SELECT a.id, count(c.rank) FROM analyses a LEFT JOIN analysis_candidates c ON c.analysis_id = a.id GROUP BY a.id"
        ).fetchall()
        assert counts and all(n == 29 for _, n in counts)
