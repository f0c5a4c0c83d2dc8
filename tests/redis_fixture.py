"""A real redis-server (Debian's package, installed by scripts/setup_redis.sh) on a free port.

Import the ``redis_url`` fixture into a test module. Without redis-server the tests skip with the
reason, unless PREFIXPLAN_REQUIRE_LIVE=1 (CI), where they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = shutil.which("redis-server")
    if exe is None:
        reason = "redis-server is not installed (scripts/setup_redis.sh)"
        if os.environ.get("PREFIXPLAN_REQUIRE_LIVE") == "1":
            pytest.fail(f"PREFIXPLAN_REQUIRE_LIVE=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    redis = pytest.importorskip("redis")
    port = _free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 20
    while True:
        try:
            if client.ping():
                break
        except redis.ConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"redis-server did not start (exit {proc.poll()})", pytrace=False)
        time.sleep(0.05)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def fresh_redis(redis_url: str) -> str:
    """``redis_url`` emptied for this test."""
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    return redis_url
