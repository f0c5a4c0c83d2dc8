"""A small local HTTP fake of vLLM / SGLang / generic OpenAI-compatible servers.

Used ONLY for fault injection (refused, timeouts, HTTP 500, malformed JSON, dying replicas,
servers ignoring max_tokens, other tokenizers) and for the SGLang adapter, because SGLang does
not serve on the CPU test machines. Live behaviour is tested against a real vLLM (tests/live).

The response shapes follow the engines' documentation:
- vLLM: ``/v1/models`` (``owned_by: "vllm"``), ``/tokenize`` -> ``{count, max_model_len, tokens}``,
  ``/v1/completions`` with ``usage.prompt_tokens_details.cached_tokens`` (final stream chunk with
  ``stream_options.include_usage``), ``/metrics`` with ``vllm:cache_config_info{block_size=..}``,
  ``vllm:prefix_cache_hits_total``, ``vllm:prefix_cache_queries_total``.
- SGLang: ``/generate`` with ``input_ids`` + ``sampling_params.max_new_tokens`` answering
  ``{text, meta_info: {prompt_tokens, completion_tokens, cached_tokens, finish_reason}}`` (streamed
  as ``data:`` events ending in ``data: [DONE]``), ``/get_server_info`` (``page_size``),
  ``/get_model_info`` (``model_path``), ``/flush_cache``, ``/metrics`` with
  ``sglang:cached_tokens_total{cache_source=..}`` and ``sglang:prompt_tokens_total``.

The cache model is vLLM's: full blocks of ``block_size`` tokens keyed by chained hashes; a request
of n tokens reuses at most ``floor((n-1)/B)*B`` tokens (the last token is always computed).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def char_tokenize(text: str) -> list[int]:
    """The fake's tokenizer: one id per character."""
    return [ord(c) % 50_000 + 10 for c in text]


def chat_text(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, add_generation_prompt: bool = True
) -> str:
    """The fake's chat template: ``<tools>..</tools>`` then ``<role>content</role>`` per message."""
    out = []
    if tools:
        out.append("<tools>" + "".join(json.dumps(t, sort_keys=True) for t in tools) + "</tools>")
    for m in messages:
        out.append(f"<{m['role']}>{m.get('content') or ''}</{m['role']}>")
    if add_generation_prompt:
        out.append("<assistant>")
    return "".join(out)


def _byte_encoder() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the token strings of byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=False)}


_BYTES = _byte_encoder()


def token_strs(text: str) -> list[str]:
    """Byte-level token strings of the fake's one-character tokens."""
    return ["".join(_BYTES[b] for b in c.encode("utf-8")) for c in text]


class VirtualClock:
    """A clock the fake server advances by its modelled prefill time and the adapter under test
    reads (``clock=``): timings are exact whatever the machine's load."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


class FakeEngine:
    """A fake engine server on 127.0.0.1; use as a context manager (``with FakeEngine() as f``).

    fault: None | "http500" | "malformed" | "slow" | "ignore_max_tokens" | "echo_auth_500" | "cut_stream"
           | "echo_auth_200" | "echo_auth_400" | "echo_auth_stream" (the Authorization header echoed back)
           | "flaky500" (first ``flaky`` completion calls fail with 500, then ok)
    token_prompts: False -> ``/v1/completions`` answers HTTP 400 to a token-id prompt (text only),
           as many generic OpenAI-compatible servers do.
    ``/v1/chat/completions`` renders with :func:`chat_text` (not for SGLang), and ``/tokenize``
    takes ``messages`` (+ ``tools``) like vLLM's and returns ``token_strs`` when asked.
    """

    def __init__(
        self,
        flavor: str = "vllm",
        *,
        block_size: int = 16,
        model: str = "fake-model",
        fault: str | None = None,
        delay: float = 2.0,
        report_cached: bool = True,
        metrics: bool = True,
        tokenize: bool = True,
        tokenizer_offset: int = 0,
        die_after: int | None = None,
        api_key: str | None = None,
        flaky: int = 1,
        ttft_model: tuple[float, float, float] | None = None,
        token_prompts: bool = True,
        clock: VirtualClock | None = None,
    ) -> None:
        self.flavor = flavor
        self.block_size = block_size
        self.model = model
        self.fault = fault
        self.delay = delay
        self.report_cached = report_cached
        self.with_metrics = metrics
        self.with_tokenize = tokenize
        self.tokenizer_offset = tokenizer_offset
        self.die_after = die_after
        self.api_key = api_key
        self.flaky = flaky
        self.ttft_model = ttft_model
        self.token_prompts = token_prompts
        self.clock = clock  # with a virtual clock, modelled prefill time advances it instead of sleeping
        self.blocks: set[int] = set()
        self.hits = 0
        self.queries = 0
        self.completions = 0
        self.requests: list[tuple[str, str, dict[str, Any] | None, dict[str, str]]] = []
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                engine.handle(self, "GET")

            def do_POST(self) -> None:
                engine.handle(self, "POST")

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:  # clients abort streams on purpose
                pass

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def die(self) -> None:
        """Stop listening (later connections are refused)."""
        threading.Thread(target=self.stop, daemon=True).start()
        time.sleep(0.05)

    # -- cache model ----------------------------------------------------------------
    def _cache(self, ids: list[int]) -> int:
        bs = self.block_size
        with self.lock:
            h = 0
            hashes = []
            for i in range(len(ids) // bs):
                h = hash((h, tuple(ids[i * bs : (i + 1) * bs])))
                hashes.append(h)
            limit = (len(ids) - 1) // bs
            cached_blocks = 0
            for i in range(min(limit, len(hashes))):
                if hashes[i] in self.blocks:
                    cached_blocks += 1
                else:
                    break
            self.blocks.update(hashes)
            cached = cached_blocks * bs
            self.hits += cached
            self.queries += len(ids)
            return cached

    # -- HTTP -----------------------------------------------------------------------
    def _send(self, h: BaseHTTPRequestHandler, code: int, body: Any, ctype: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else (json.dumps(body) if not isinstance(body, str) else body).encode()
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _metrics_text(self) -> str:
        if self.flavor == "vllm":
            return (
                "# HELP vllm:cache_config_info info\n# TYPE vllm:cache_config_info gauge\n"
                f'vllm:cache_config_info{{block_size="{self.block_size}",kv_cache_memory_bytes="1048576",'
                f'kv_cache_size_tokens="2048",enable_prefix_caching="True"}} 1.0\n'
                f'vllm:prefix_cache_hits_total{{engine="0",model_name="{self.model}"}} {float(self.hits)}\n'
                f'vllm:prefix_cache_queries_total{{engine="0",model_name="{self.model}"}} {float(self.queries)}\n'
                f'vllm:num_requests_running{{engine="0",model_name="{self.model}"}} 0.0\n'
            )
        if self.flavor == "sglang":
            return (
                f'sglang:cached_tokens_total{{cache_source="device",model_name="{self.model}"}} {float(self.hits)}\n'
                f'sglang:cached_tokens_total{{cache_source="host",model_name="{self.model}"}} 0.0\n'
                f'sglang:prompt_tokens_total{{model_name="{self.model}"}} {float(self.queries)}\n'
                f'sglang:num_running_reqs{{model_name="{self.model}"}} 0.0\n'
            )
        return ""

    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        path = h.path.split("?")[0]
        body: dict[str, Any] | None = None
        if method == "POST":
            n = int(h.headers.get("Content-Length") or 0)
            raw = h.rfile.read(n) if n else b""
            body = json.loads(raw) if raw else None
        headers = {k.lower(): v for k, v in h.headers.items()}
        self.requests.append((method, path, body, headers))
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return self._send(h, 401, {"error": "unauthorized"})
        owned = {"vllm": "vllm", "sglang": "sglang"}.get(self.flavor, "someone")
        if self.fault == "redirect":  # a load balancer that sends every request to another host
            h.send_response(307)
            h.send_header("Location", f"http://elsewhere.invalid:8443{path}?token=leaked-in-query")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        if method == "GET" and path == "/v1/models" and self.fault == "endless_json":
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.end_headers()
            try:
                h.wfile.write(b"[")
                while self._server is not None:
                    h.wfile.write(b"0," * 65536)
            except OSError:
                pass
            return None
        if method == "GET" and path == "/v1/models" and self.fault == "nest_bomb":
            return self._send(h, 200, "[" * 100_000 + "]" * 100_000)
        if method == "GET" and path == "/v1/models" and self.fault == "echo_auth_model":
            echoed = self.model + " " + headers.get("authorization", "")
            return self._send(
                h, 200, {"object": "list", "data": [{"id": echoed, "owned_by": owned, "max_model_len": 4096}]}
            )
        if method == "GET" and path == "/v1/models":
            return self._send(
                h,
                200,
                {
                    "object": "list",
                    "data": [{"id": self.model, "object": "model", "owned_by": owned, "max_model_len": 4096}],
                },
            )
        if method == "GET" and path == "/metrics" and self.with_metrics and self.flavor in ("vllm", "sglang"):
            return self._send(h, 200, self._metrics_text(), "text/plain; version=0.0.4")
        if method == "GET" and path == "/version" and self.flavor == "vllm":
            return self._send(h, 200, {"version": "0.0-fake"})
        if self.flavor == "sglang" and method == "GET" and path == "/get_server_info":
            return self._send(
                h,
                200,
                {
                    "page_size": self.block_size,
                    "served_model_name": self.model,
                    "model_path": "/models/" + self.model,
                    "version": "0.0-fake",
                    "context_length": 4096,
                },
            )
        if self.flavor == "sglang" and method == "GET" and path == "/get_model_info":
            return self._send(h, 200, {"model_path": "/models/" + self.model, "is_generation": True})
        if method == "POST" and path == "/tokenize" and self.with_tokenize:
            if self.fault == "echo_auth_500" and body and body.get("messages"):
                return self._send(h, 500, {"error": "rejected credentials " + headers.get("authorization", "")})
            b = body or {}
            if "messages" in b:
                text = chat_text(b["messages"], b.get("tools"), bool(b.get("add_generation_prompt", True)))
            else:
                text = str(b.get("prompt", ""))
            ids = [i + self.tokenizer_offset for i in char_tokenize(text)]
            answer: dict[str, Any] = {"count": len(ids), "max_model_len": 4096, "tokens": ids}
            if b.get("return_token_strs"):
                answer["token_strs"] = token_strs(text)
            return self._send(h, 200, answer)
        if method == "POST" and path == "/reset_prefix_cache" and self.flavor == "vllm":
            self.blocks.clear()
            return self._send(h, 200, "")
        if method == "POST" and path == "/flush_cache" and self.flavor == "sglang":
            self.blocks.clear()
            return self._send(h, 200, "")
        if method == "POST" and (
            (path == "/v1/completions" and self.flavor != "sglang") or (path == "/generate" and self.flavor == "sglang")
        ):
            prompt = (body or {}).get("prompt")
            if path == "/v1/completions" and isinstance(prompt, list) and not self.token_prompts:
                return self._send(h, 400, {"error": {"message": "prompt must be a string", "type": "invalid_request"}})
            return self._complete(h, path, body or {}, headers)
        if method == "POST" and path == "/v1/chat/completions" and self.flavor != "sglang":
            return self._complete(h, path, body or {}, headers)
        return self._send(h, 404, {"detail": "Not Found"})

    def _drip(self, h: BaseHTTPRequestHandler) -> None:
        """``trickle``: a valid-looking stream at one byte every ``delay`` seconds; ``endless``:
        data as fast as the client reads, forever (until it hangs up)."""
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()
        chunk = b'data: {"choices": [{"index": 0, "text": "x"}]}\n\n' if self.fault == "endless" else b"d"
        try:
            while self._server is not None:
                h.wfile.write(chunk * (4096 if self.fault == "endless" else 1))
                h.wfile.flush()
                if self.fault == "trickle":
                    time.sleep(self.delay)
        except OSError:  # the client gave up: what the test wants
            pass

    def _echo_auth(self, h: BaseHTTPRequestHandler, auth: str) -> None:
        """A replica (or a proxy in front of it) that echoes the Authorization header it got: in a
        200 answer and a header, in a 400, or in a stream that cuts the key across two writes."""
        if self.fault == "echo_auth_stream":
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("X-Seen-Auth", auth)
            h.end_headers()
            text = json.dumps({"choices": [{"index": 0, "delta": {"content": "you sent " + auth}}]})
            cut = text.index(auth) + len(auth) // 2
            for piece in (f"data: {text[:cut]}".encode(), f"{text[cut:]}\n\n".encode(), b"data: [DONE]\n\n"):
                h.wfile.write(piece)
                h.wfile.flush()
                time.sleep(0.05)  # separate reads on the proxy's side
            return None
        if self.fault == "echo_auth_400":
            return self._send(h, 400, {"error": {"message": "unknown key " + auth, "type": "invalid_request_error"}})
        answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "you sent " + auth}}]}
        body = json.dumps(answer).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("X-Seen-Auth", auth)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        return None

    def _complete(self, h: BaseHTTPRequestHandler, path: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self.lock:
            self.completions += 1
            count = self.completions
        if self.die_after is not None and count > self.die_after:
            self.die()
            h.close_connection = True
            return
        if self.fault == "http500" or (self.fault == "flaky500" and count <= self.flaky):
            return self._send(h, 500, {"error": "internal error"})
        if self.fault == "echo_auth_500":
            return self._send(h, 500, {"error": "rejected credentials " + headers.get("authorization", "")})
        if self.fault in ("echo_auth_200", "echo_auth_400", "echo_auth_stream"):
            return self._echo_auth(h, headers.get("authorization", ""))
        if self.fault == "malformed":
            return self._send(h, 200, "{not json", "application/json")
        if self.fault == "slow":
            time.sleep(self.delay)
        if self.fault in ("trickle", "endless"):
            return self._drip(h)
        if self.fault == "cut_stream":  # one event of a body announced longer, then the connection drops
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Content-Length", "100000")
            h.end_headers()
            h.wfile.write(b'data: {"id": "chat-1", "choices": [{"index": 0, "delta": {"content": "x"}}]}\n\n')
            h.wfile.flush()
            h.close_connection = True
            return None
        chat = path == "/v1/chat/completions"
        if chat:
            ids = char_tokenize(chat_text(body.get("messages") or [], body.get("tools")))
        else:
            ids = body.get("input_ids") if self.flavor == "sglang" else body.get("prompt")
            ids = char_tokenize(ids) if isinstance(ids, str) else [int(i) for i in ids or []]
        cached = self._cache(ids)
        if self.fault == "cached_huge":
            cached = 10**400
        elif self.fault == "cached_billion":
            cached = 10**9
        elif self.fault == "cached_full":
            cached = len(ids)  # a full hit, even on the cold warm-up: impossible
        if self.ttft_model is not None:
            a, b, c = self.ttft_model
            new = len(ids) - cached
            seconds = a + b * new + c * new * (cached + new / 2)
            if self.clock is not None:
                self.clock.advance(seconds)
            else:
                time.sleep(seconds)
        max_tokens = (
            (body.get("sampling_params") or {}).get("max_new_tokens")
            if self.flavor == "sglang"
            else body.get("max_tokens")
        )
        produced = 50 if self.fault == "ignore_max_tokens" else int(max_tokens or 16)
        stream = bool(body.get("stream"))
        if self.flavor == "sglang":
            meta = {
                "id": "req-1",
                "prompt_tokens": len(ids),
                "completion_tokens": produced,
                "finish_reason": {"type": "length", "length": produced},
            }
            if self.report_cached:
                meta["cached_tokens"] = cached
            if not stream:
                return self._send(h, 200, {"text": "x" * produced, "output_ids": [1] * produced, "meta_info": meta})
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.end_headers()
            for k in range(1, produced + 1):
                ev = {"text": "x" * k, "meta_info": dict(meta, completion_tokens=k)}
                h.wfile.write(f"data: {json.dumps(ev)}\n\n".encode())
                h.wfile.flush()
                if self.fault == "ignore_max_tokens":
                    time.sleep(0.01)
            h.wfile.write(b"data: [DONE]\n\n")
            return None
        usage: dict[str, Any] = {
            "prompt_tokens": len(ids),
            "completion_tokens": produced,
            "total_tokens": len(ids) + produced,
        }
        if self.report_cached:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        if not stream:
            choice: dict[str, Any] = {"index": 0, "text": "x" * produced, "finish_reason": "length"}
            if chat:
                choice = {
                    "index": 0,
                    "message": {"role": "assistant", "content": "x" * produced},
                    "finish_reason": "length",
                }
            return self._send(
                h,
                200,
                {
                    "id": "cmpl-1",
                    "object": "chat.completion" if chat else "text_completion",
                    "model": self.model,
                    "choices": [choice],
                    "usage": usage,
                },
            )
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()
        if chat:  # role chunk first, as OpenAI-style chat streams do
            ev = {
                "id": "chat-1",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
            }
            h.wfile.write(f"data: {json.dumps(ev)}\n\n".encode())
        for _ in range(produced):
            ev = {"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "text": "x"}]}
            if chat:
                ev = {
                    "id": "chat-1",
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"content": "x"}}],
                }
            h.wfile.write(f"data: {json.dumps(ev)}\n\n".encode())
            h.wfile.flush()
            if self.fault == "ignore_max_tokens":
                time.sleep(0.01)
        if (body.get("stream_options") or {}).get("include_usage"):
            h.wfile.write(f"data: {json.dumps({'id': 'cmpl-1', 'choices': [], 'usage': usage})}\n\n".encode())
        h.wfile.write(b"data: [DONE]\n\n")
        return None


def free_port_url() -> str:
    """A URL where nothing listens (connection refused)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
