"""moto's standalone S3 server in its own process on 127.0.0.1, with the AWS environment pointing
at it (credentials and endpoint read from the environment, as in production). Tests that need it
skip with the reason when it cannot start."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

SECRET = "very-secret-key-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Start the server, set the AWS environment, yield its URL; stop it and restore the environment."""
    try:
        import boto3  # noqa: F401
        import s3fs
    except ImportError as exc:
        pytest.skip(f"the S3 test server needs moto, boto3 and s3fs (pip install -e '.[test]'): {exc}")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        pytest.skip(f"moto's S3 server could not start: {exc}")
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            err = (proc.communicate()[1] or b"").decode(errors="replace")[-500:]
            pytest.skip(f"moto's S3 server did not start on {url}: {err or 'timed out'}")
        time.sleep(0.1)
    env = {
        "AWS_ACCESS_KEY_ID": "testing-key-id",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": url,
    }
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            mp.delenv("AWS_PROFILE", raising=False)
            mp.delenv("AWS_SESSION_TOKEN", raising=False)
            s3fs.S3FileSystem.clear_instance_cache()
            try:
                yield url
            finally:
                s3fs.S3FileSystem.clear_instance_cache()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
