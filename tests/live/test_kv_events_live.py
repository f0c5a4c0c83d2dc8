"""KV events from a real vLLM (CPU build, tiny random-weight Qwen3, block size 128) into the
residency index.

Must-show of issue 41 (the subscriber's part):
- after a prompt of known token ids (``/tokenize``) is sent with ``max_tokens: 1``, the index holds
  exactly the prompt's block-aligned prefix: the keys of its ``len // 128`` full blocks, nothing
  else; a subscriber started afterwards learns the same index through the replay endpoint;
- a batch lost between the engine and a subscriber (a relay that drops one) is a gap, healed
  through the replay endpoint: that subscriber's index equals the one fed without loss.
The session server publishes events (tests/live/conftest.py: ``kv_events=True``, ipc endpoints
the engine binds). Figures go to test-artifacts/live-summary.json.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("zmq")
pytest.importorskip("msgpack")

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "test-artifacts" / "live-summary.json"
sys.path.insert(0, str(ROOT / "tests"))

from kv_event_cases import wait_for  # noqa: E402

from prefixplan.residency.index import ResidencyIndex  # noqa: E402
from prefixplan.residency.stream import StreamConfig  # noqa: E402
from prefixplan.residency.subscriber import EventSource, KvEventSubscriber, source_for_engine  # noqa: E402

R = "r0"
PATIENT = StreamConfig(replay_timeout=60.0, probe_interval=None)


def _summary(key: str, value: object) -> None:
    SUMMARY.parent.mkdir(exist_ok=True)
    data = json.loads(SUMMARY.read_text()) if SUMMARY.is_file() else {}
    data[key] = value
    SUMMARY.write_text(json.dumps(data, indent=2) + "\n")
    print(f"{key}: {json.dumps(value)}")


@pytest.fixture
def events_server(vllm_server):
    if not vllm_server.kv_events_endpoint:
        pytest.skip("the live server does not publish KV events")
    return vllm_server


def _ids(server, text: str) -> list[int]:
    r = httpx.post(server.url + "/tokenize", json={"model": server.served_model_name, "prompt": text}, timeout=60)
    r.raise_for_status()
    return list(r.json()["tokens"])


def _complete(server, ids: list[int]) -> dict:
    body = {"model": server.served_model_name, "prompt": ids, "max_tokens": 1, "temperature": 0}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    return r.json()


def _text(tag: str, n: int) -> str:
    return " ".join(f"{tag} clause {i}: keep the cache warm and the keys exact." for i in range(n))


def _source(server, replica: str = R, endpoint: str | None = None) -> EventSource:
    src = source_for_engine(
        replica,
        server.kv_events_endpoint,
        host="127.0.0.1",
        replay_endpoint=server.kv_events_replay,
        model=server.served_model_name,
    )
    if endpoint is not None:
        src = EventSource(replica, endpoint, replay_endpoint=src.replay_endpoint, model=src.model)
    return src


def _reset_seen_live(server, *indexes: ResidencyIndex) -> None:
    """Reset the prefix cache until every index received its ``AllBlocksCleared`` live: from then
    on each subscription is up, and the cache and the indexes start empty. (vLLM publishes events
    after a scheduler step: a short request, too short to fill a block, carries the reset out.)"""
    before = [ix.counters(R).batches_received for ix in indexes]
    ping = _ids(server, "ping")
    deadline = time.monotonic() + 120
    while True:
        server.reset()
        _complete(server, ping)
        try:
            wait_for(
                lambda: all(ix.counters(R).batches_received > b for ix, b in zip(indexes, before, strict=True)),
                limit=2.0,
            )
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def test_the_index_holds_exactly_the_prompts_block_aligned_prefix(events_server) -> None:
    server = events_server
    bs = server.block_size
    ids = _ids(server, _text("alpha", 120))
    full = len(ids) // bs
    assert full >= 3
    index = ResidencyIndex()
    with KvEventSubscriber(index, [_source(server)], config=PATIENT):
        _reset_seen_live(server, index)
        usage = _complete(server, ids)["usage"]
        keys = index.prompt_keys(ids, bs, model=server.served_model_name)
        assert len(keys) == full
        wait_for(lambda: index.holds(R, keys), what="the prompt's blocks in the index")
        wait_for(lambda: index.resident_keys(R) == set(keys), what="exactly the prompt's blocks")
        status = index.status(R)
    assert index.block_size(R) == bs
    assert status.resident_blocks == {"GPU": full}
    assert index.resident_prefix_blocks(R, keys) == full
    # a subscriber started now learns the same from the replay endpoint's buffer alone
    late = ResidencyIndex()
    with KvEventSubscriber(late, [_source(server)], config=PATIENT):
        wait_for(lambda: late.status(R).last_seq == status.last_seq, what="the late subscriber's join")
    assert late.resident_keys(R) == index.resident_keys(R)
    _summary(
        "kv_events_prompt_prefix",
        {
            "tokenize_ids": len(ids),
            "block_size": bs,
            "full_blocks": full,
            "index_blocks": status.resident_blocks,
            "keys_equal": True,
            "late_join_equal": True,
            "prompt_tokens_reported": usage["prompt_tokens"],
            "batches_applied": status.counters["batches_applied"],
            "events_applied": status.counters["events_applied"],
        },
    )


class LossyRelay:
    """Forwards the engine's events to an ipc endpoint of its own, dropping the first message that
    arrives after :meth:`arm`."""

    def __init__(self, upstream: str, downstream: str) -> None:
        import zmq

        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(upstream)
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.bind(downstream)
        self.armed = threading.Event()
        self.dropped: list[int] = []
        self.forwarded = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.sub.poll(20):
                continue
            frames = self.sub.recv_multipart()
            if self.armed.is_set() and not self.dropped:
                self.dropped.append(int.from_bytes(frames[1], "big"))
                continue
            self.pub.send_multipart(frames)
            self.forwarded += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sub.close(linger=0)
        self.pub.close(linger=0)
        self.ctx.term()


@pytest.fixture
def relay(events_server, tmp_path: Path) -> Iterator[tuple[LossyRelay, str]]:
    downstream = f"ipc://{tmp_path}/relay.pub"
    r = LossyRelay(events_server.kv_events_endpoint, downstream)
    try:
        yield r, downstream
    finally:
        r.close()


def test_a_gap_healed_by_the_replay_endpoint_yields_the_same_index(events_server, relay) -> None:
    server = events_server
    bs = server.block_size
    lossy, downstream = relay
    direct, healed = ResidencyIndex(), ResidencyIndex()
    subs = [
        KvEventSubscriber(direct, [_source(server)], config=PATIENT),
        KvEventSubscriber(healed, [_source(server, endpoint=downstream)], config=PATIENT),
    ]
    for s in subs:
        s.start()
    try:
        _reset_seen_live(server, direct, healed)  # both paths (direct, through the relay) are up
        # a batch published before the relay path's subscriptions were up is a real gap too
        # (healed by the replay endpoint): let such gaps close, then count only the armed drop's
        wait_for(
            lambda: (
                healed.counters(R).gaps == healed.counters(R).gaps_healed
                and healed.status(R).last_seq == direct.status(R).last_seq
            ),
            what="gaps before arming closed",
        )
        setup_gaps = healed.counters(R).gaps
        lossy.armed.set()
        first, second = _ids(server, _text("beta", 90)), _ids(server, _text("gamma", 70))
        _complete(server, first)  # its first batch is dropped on the way to `healed`
        _complete(server, second)  # a later batch reveals the gap
        want = set(direct.prompt_keys(first, bs, model=server.served_model_name))
        want |= set(direct.prompt_keys(second, bs, model=server.served_model_name))
        wait_for(lambda: direct.resident_keys(R) == want, what="the direct index")
        wait_for(lambda: healed.counters(R).gaps_healed == setup_gaps + 1, what="the gap healed")
        wait_for(lambda: healed.status(R).last_seq == direct.status(R).last_seq, what="the same last batch")
    finally:
        for s in subs:
            s.stop()
    assert lossy.dropped
    assert healed.resident_keys(R) == direct.resident_keys(R) == want
    h = healed.status(R)
    assert (h.counters["gaps"] - setup_gaps, h.counters["gaps_healed"] - setup_gaps, h.resyncs) == (1, 1, {})
    _summary(
        "kv_events_gap_healed",
        {
            "dropped_seq": lossy.dropped[0],
            "gaps": h.counters["gaps"],
            "gaps_healed": h.counters["gaps_healed"],
            "replay_requests": h.counters["replay_requests"],
            "batches_replayed": h.counters["batches_replayed"],
            "resyncs": h.resyncs,
            "index_blocks": h.resident_blocks,
            "direct_index_blocks": direct.status(R).resident_blocks,
            "equal": True,
        },
    )
