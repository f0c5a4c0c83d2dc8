"""One real vLLM (CPU build) server for the live test session.

scripts/stages/20-live.sh installs ``.venv-vllm`` (scripts/setup_vllm.sh) and builds the tiny
random-weight Qwen3 model (scripts/make_tiny_model.py) before running ``pytest -m live tests/live``;
the ``vllm_server`` fixture then starts ONE server (scripts/vllm_server.py) for the whole session
and stops it at the end; ``vllm_logging_server`` starts a second one, for the request-log tests'
module only, that logs requests at DEBUG. When vLLM or the model is missing, or the server does not start, the live
tests skip with the reason, unless ``PREFIXPLAN_REQUIRE_LIVE=1`` (set by ``.ci/run``): then they fail.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"


def _script(name: str, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "scripts" / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


def _server_module():
    return _script("vllm_server.py", "vllm_server_script")


def capture_module():
    """scripts/capture_vllm_log.py: the request set whose log lines tests/live/test_logs_live.py reads."""
    return _script("capture_vllm_log.py", "capture_vllm_log_script")


def _unavailable(reason: str) -> None:
    if os.environ.get("PREFIXPLAN_REQUIRE_LIVE") == "1":
        pytest.fail(f"live vLLM required (PREFIXPLAN_REQUIRE_LIVE=1) but unavailable: {reason}", pytrace=False)
    pytest.skip(f"live vLLM unavailable: {reason} (run scripts/stages/20-live.sh)")


@dataclass
class LiveServer:
    """The running server as the tests see it."""

    url: str
    served_model_name: str
    model_dir: Path
    block_size: int
    log_path: Path
    startup_s: float
    kv_events_endpoint: str | None = None  # KV cache events (the session server publishes them)
    kv_events_replay: str | None = None

    def reset(self) -> None:
        """Drop the prefix cache (``VLLM_SERVER_DEV_MODE=1``), so each test starts cold."""
        import httpx

        r = httpx.post(self.url + "/reset_prefix_cache", timeout=30)
        r.raise_for_status()


def _serve(
    log_name: str,
    extra_args: list[str] | None = None,
    extra_env: dict[str, str] | None = None,
    *,
    kv_events: bool = False,
) -> Iterator[LiveServer]:
    mod = _server_module()
    python = Path(os.environ.get("PREFIXPLAN_VLLM_PYTHON", mod.DEFAULT_PYTHON))
    model = Path(os.environ.get("PREFIXPLAN_TINY_MODEL", mod.DEFAULT_MODEL))
    if not python.is_file():
        _unavailable(f"{python} missing (scripts/setup_vllm.sh not run or failed)")
    if not (model / "config.json").is_file():
        _unavailable(f"tiny model missing in {model} (.venv-vllm/bin/python scripts/make_tiny_model.py)")
    ARTIFACTS.mkdir(exist_ok=True)
    log = ARTIFACTS / log_name
    try:
        info, proc = mod.start(
            model,
            python=python,
            log_path=log,
            timeout=float(os.environ.get("PREFIXPLAN_VLLM_START_TIMEOUT", "300")),
            extra_args=extra_args,
            extra_env=extra_env,
            kv_events=kv_events,
        )
    except mod.ServerError as err:
        _unavailable(str(err))
    try:
        if info.block_size is None:
            _unavailable("the server did not expose vllm:cache_config_info{block_size}")
        yield LiveServer(
            url=info.url,
            served_model_name=info.served_model_name,
            model_dir=Path(info.model_dir),
            block_size=int(info.block_size),
            log_path=log,
            startup_s=info.startup_s,
            kv_events_endpoint=info.kv_events_endpoint,
            kv_events_replay=info.kv_events_replay,
        )
    finally:
        mod.stop_process(proc.pid)
        proc.wait(timeout=30)
        if kv_events:
            mod.remove_kv_event_files(info.port)


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[LiveServer]:
    """The session's server; it publishes KV cache events (tests/live/test_kv_events_live.py)."""
    yield from _serve("vllm-server.log", kv_events=True)


@pytest.fixture(scope="module")
def vllm_logging_server() -> Iterator[LiveServer]:
    """A second server, for the request-log tests only: ``--enable-log-requests`` at DEBUG
    (scripts/capture_vllm_log.py's flags). Kept apart from the session server because at DEBUG
    vLLM 0.32 logs each request body with a dump that consumes its tool calls: a ``/tokenize`` whose
    tool-call arguments are objects then answers 200 without them instead of 400."""
    capture = capture_module()
    yield from _serve("vllm-request-log-server.log", capture.SERVER_FLAGS, capture.SERVER_ENV)
