"""Engine adapters against tests/fake_engine.py.

The fake follows vLLM's and SGLang's documented response shapes (see its docstring); SGLang does
not serve on the CPU test machines, so its adapter is tested here only. The vLLM adapter is also
tested live against a real vLLM in tests/live.
"""

from __future__ import annotations

import pytest
from fake_engine import FakeEngine, char_tokenize, free_port_url

from prefixplan.engines.base import EngineRequestError
from prefixplan.engines.detect import connect
from prefixplan.engines.endpoint import Endpoint
from prefixplan.engines.metrics import counter_sum, first_label, parse_metrics
from prefixplan.engines.openai_compat import OpenAICompatAdapter
from prefixplan.engines.retries import with_retries
from prefixplan.engines.sglang import SGLangAdapter
from prefixplan.engines.vllm import VLLMAdapter
from prefixplan.errors import ExitCode, UsageError

IDS = list(range(1000, 1040))  # 40 tokens


def test_metrics_parsing_labels_suffixes_and_escapes() -> None:
    text = (
        "# HELP vllm:prefix_cache_hits_total hits\n# TYPE vllm:prefix_cache_hits_total counter\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 12.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 3\n'
        'vllm:cache_config_info{block_size="128",note="a \\"quoted\\", b"} 1.0\n'
        "sglang:cached_tokens 7 1700000000000\n"
        "garbage line without value\n"
    )
    samples = parse_metrics(text)
    assert counter_sum(samples, "vllm:prefix_cache_hits") == 15.0
    assert counter_sum(samples, "vllm:prefix_cache_hits_total", engine="1") == 3.0
    assert counter_sum(samples, "sglang:cached_tokens_total") == 7.0
    assert counter_sum(samples, "vllm:absent") is None
    assert first_label(samples, "vllm:cache_config_info", "block_size") == "128"
    assert first_label(samples, "vllm:cache_config_info", "note") == 'a "quoted", b'


@pytest.mark.parametrize(
    "flavor,cls", [("vllm", VLLMAdapter), ("sglang", SGLangAdapter), ("openai", OpenAICompatAdapter)]
)
def test_detect_engine_from_server_endpoints(flavor: str, cls: type) -> None:
    with FakeEngine(flavor) as fake:
        adapter = connect(Endpoint(fake.url))
        assert type(adapter) is cls
        adapter.close()


def test_detect_refused_names_endpoint() -> None:
    url = free_port_url()
    with pytest.raises(EngineRequestError) as err:
        connect(Endpoint(url), timeout=2)
    assert err.value.kind == "refused" and err.value.retryable
    assert url in str(err.value) and "connection refused" in str(err.value)
    assert err.value.exit_code == ExitCode.ENDPOINT


def test_vllm_adapter_info_tokenize_completions_counters() -> None:
    with FakeEngine("vllm", block_size=16) as fake, VLLMAdapter(Endpoint(fake.url)) as a:
        info = a.server_info()
        assert (info.engine, info.model, info.block_size, info.block_size_source) == (
            "vllm",
            "fake-model",
            16,
            "metrics",
        )
        assert info.kv_bytes_per_token == 1048576 / 2048
        assert a.tokenize_text("héllo") == char_tokenize("héllo")
        cold = a.complete_ids(IDS, max_tokens=1)
        assert cold.cached_tokens == 0 and cold.prompt_tokens == 40 and cold.completion_tokens == 1 and cold.streamed
        warm = a.complete_ids(IDS + [5], max_tokens=1, stream=False)
        assert warm.cached_tokens == 32 and not warm.streamed  # floor(40/16)*16, last-token rule leaves it at 32
        method, path, body, _ = fake.requests[-1]
        assert (method, path, body["prompt"], body["max_tokens"]) == ("POST", "/v1/completions", IDS + [5], 1)
        c = a.cache_counters()
        assert c is not None and c.hits == 32 and c.queries == 81 and c.running == 0
        assert a.reset_cache() and not fake.blocks


def test_sglang_adapter_generate_shape_meta_info_and_priority() -> None:
    with FakeEngine("sglang", block_size=8) as fake, SGLangAdapter(Endpoint(fake.url)) as a:
        info = a.server_info()
        assert (info.engine, info.model, info.block_size, info.block_size_source) == (
            "sglang",
            "fake-model",
            8,
            "server_info",
        )
        a.complete_ids(IDS, max_tokens=1, priority=5)
        _, path, body, _ = fake.requests[-1]
        assert path == "/generate"
        assert body["input_ids"] == IDS and body["sampling_params"]["max_new_tokens"] == 1 and body["priority"] == 5
        res = a.complete_ids(IDS + [1, 2], max_tokens=1, stream=True)
        assert res.cached_tokens == 40 and res.prompt_tokens == 42 and res.streamed
        res = a.complete_ids(IDS + [1, 3], max_tokens=1, stream=False)
        assert res.cached_tokens == 40 and not res.streamed
        c = a.cache_counters()
        assert c is not None and c.hits == 80 and c.queries == 40 + 42 + 42
        assert a.tokenize_text("ab") == char_tokenize("ab")
        assert a.reset_cache() and not fake.blocks


def test_sglang_without_cache_report_gives_none() -> None:
    with FakeEngine("sglang", report_cached=False) as fake, SGLangAdapter(Endpoint(fake.url)) as a:
        assert a.complete_ids(IDS).cached_tokens is None


@pytest.mark.parametrize(
    "fault,kind,retryable,text",
    [
        ("http500", "http", True, "HTTP 500"),
        ("malformed", "malformed", False, "malformed JSON"),
        ("ignore_max_tokens", "protocol", False, "ignored max_tokens=1"),
    ],
)
@pytest.mark.parametrize("stream", [True, False])
def test_completion_faults_are_named(fault: str, kind: str, retryable: bool, text: str, stream: bool) -> None:
    with FakeEngine("vllm", fault=fault) as fake, VLLMAdapter(Endpoint(fake.url), timeout=5) as a:
        url = fake.url
        with pytest.raises(EngineRequestError) as err:
            a.complete_ids(IDS, max_tokens=1, stream=stream)
    assert err.value.kind == kind and err.value.retryable is retryable
    assert text in str(err.value) and url in str(err.value)


def test_sglang_ignoring_max_new_tokens_aborts_stream() -> None:
    with FakeEngine("sglang", fault="ignore_max_tokens") as fake, SGLangAdapter(Endpoint(fake.url), timeout=5) as a:
        with pytest.raises(EngineRequestError, match="ignored max_tokens=1"):
            a.complete_ids(IDS, max_tokens=1)


def test_timeout_is_bounded_and_retryable() -> None:
    import time

    with FakeEngine("vllm", fault="slow", delay=1.5) as fake, VLLMAdapter(Endpoint(fake.url), timeout=0.3) as a:
        t0 = time.perf_counter()
        with pytest.raises(EngineRequestError) as err:
            a.complete_ids(IDS)
        assert time.perf_counter() - t0 < 1.2
    assert err.value.kind == "timeout" and err.value.retryable and "timed out after 0.3s" in str(err.value)


def test_with_retries_bounded_backoff() -> None:
    with FakeEngine("vllm", fault="flaky500", flaky=2) as fake, VLLMAdapter(Endpoint(fake.url)) as a:
        waits: list[float] = []
        res = with_retries(lambda: a.complete_ids(IDS), retries=2, backoff=0.1, sleep=waits.append)
        assert res.prompt_tokens == 40 and waits == [0.1, 0.2] and fake.completions == 3
    with FakeEngine("vllm", fault="http500") as fake, VLLMAdapter(Endpoint(fake.url)) as a:
        waits = []
        with pytest.raises(EngineRequestError, match=r"after 3 attempts"):
            with_retries(lambda: a.complete_ids(IDS), retries=2, backoff=0.1, sleep=waits.append)
        assert fake.completions == 3 and waits == [0.1, 0.2]
    with FakeEngine("vllm", fault="malformed") as fake, VLLMAdapter(Endpoint(fake.url)) as a:
        with pytest.raises(EngineRequestError):
            with_retries(lambda: a.complete_ids(IDS, stream=False), retries=2, backoff=0.1, sleep=waits.append)
        assert fake.completions == 1  # not retryable


def test_api_key_from_env_sent_and_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-SECRET-123456"
    monkeypatch.setenv("MY_KEY", secret)
    with FakeEngine("vllm", api_key=secret, fault="echo_auth_500") as fake:
        a = VLLMAdapter(Endpoint(fake.url, api_key_env="MY_KEY"))
        assert a.server_info().model == "fake-model"  # 401 without the header
        assert fake.requests[-1][3]["authorization"] == f"Bearer {secret}"
        with pytest.raises(EngineRequestError) as err:
            a.complete_ids(IDS)
        assert "***" in str(err.value) and secret not in str(err.value)
        assert secret not in repr(a) and secret not in repr(a.endpoint)
        a.close()
    monkeypatch.delenv("MY_KEY")
    with pytest.raises(UsageError, match="MY_KEY"):
        VLLMAdapter(Endpoint("http://127.0.0.1:1", api_key_env="MY_KEY"))


def test_endpoint_url_validation_and_display() -> None:
    with pytest.raises(UsageError):
        Endpoint("ftp://x")
    with pytest.raises(UsageError, match="carries credentials") as info:
        Endpoint("http://user:pw@host:8000/base/")
    assert "pw" not in str(info.value) and "api-key-env" in (info.value.hint or "")
    with pytest.raises(UsageError, match="port must be 1-65535"):
        Endpoint("http://127.0.0.1:99999")
    e = Endpoint("http://host:8000/base/?token=abc")
    assert e.label == "http://host:8000/base" and "abc" not in e.label
