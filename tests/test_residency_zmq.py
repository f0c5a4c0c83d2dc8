"""The subscriber on real ZMQ sockets, against a publisher that speaks vLLM's protocol
(tests/kv_event_cases.py): both endpoint styles (an engine that binds, over ipc and a tcp
wildcard; an engine that connects to a subscriber that binds), a batch lost on the wire healed
through the replay endpoint, an engine restart on the same endpoint, and the Prometheus metrics.
Waits are on conditions with generous timeouts, never on the machine's speed."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

pytest.importorskip("zmq")
pytest.importorskip("msgpack")

from prefixplan.residency.index import ResidencyIndex
from prefixplan.residency.metrics import register_metrics
from prefixplan.residency.stream import StreamConfig
from prefixplan.residency.subscriber import EventSource, KvEventSubscriber, source_for_engine
from tests.kv_event_cases import BS, FINAL, MODEL, PROMPTS, Publisher, history, join, pack, stored, wait_for

R = "r0"
PATIENT = StreamConfig(replay_timeout=60.0, probe_interval=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def held(index: ResidencyIndex) -> dict[str, int]:
    return {p: index.resident_prefix_blocks(R, index.prompt_keys(t, BS, model=MODEL)) for p, t in PROMPTS.items()}


def _styles(tmp_path: Path) -> dict[str, tuple[str, str]]:
    return {
        "ipc (engine binds)": (f"ipc://{tmp_path}/kv.pub", f"ipc://{tmp_path}/kv.replay"),
        "tcp wildcard (engine binds)": (f"tcp://*:{free_port()}", f"tcp://*:{free_port()}"),
        "plain tcp (engine connects, subscriber binds)": (
            f"tcp://127.0.0.1:{free_port()}",
            f"tcp://127.0.0.1:{free_port()}",
        ),
    }


@pytest.mark.parametrize(
    "style", ["ipc (engine binds)", "tcp wildcard (engine binds)", "plain tcp (engine connects, subscriber binds)"]
)
def test_endpoint_styles_and_a_gap_healed_by_replay(tmp_path: Path, style: str) -> None:
    endpoint, replay = _styles(tmp_path)[style]
    source = source_for_engine(R, endpoint, host="127.0.0.1", replay_endpoint=replay, model=MODEL)
    assert source.bind == style.startswith("plain tcp")
    index = ResidencyIndex()
    batches = history()
    with KvEventSubscriber(index, [source], config=PATIENT):  # binds first where the engine connects
        pub = Publisher(endpoint, replay)
        try:
            join(pub, index, R, batches[0])
            pub.publish(batches[1])
            pub.publish(batches[2], drop=True)  # lost on the wire, still in the replay buffer
            pub.publish(batches[3])
            pub.publish(batches[4])
            wait_for(lambda: index.counters(R).batches_applied == 5, what="five batches applied")
            wait_for(lambda: index.status(R).counters["gaps_healed"] == 1, what="the gap closed")
        finally:
            pub.close()
    assert held(index) == FINAL
    c = index.status(R)
    assert (c.counters["gaps"], c.counters["gaps_healed"], c.resyncs) == (1, 1, {})
    assert 2 in pub.replay_requests  # asked from the missing batch
    assert c.events == "live" and c.last_seq == 4


def test_an_sglang_style_publisher(tmp_path: Path) -> None:
    # positional events, a topic, and replay answers without the topic frame (SGLang's publisher)
    endpoint, replay = f"ipc://{tmp_path}/sgl.pub", f"ipc://{tmp_path}/sgl.replay"
    index = ResidencyIndex()
    batches = history("positional")
    source = EventSource(R, endpoint, replay_endpoint=replay, topic="kv-events", model=MODEL)
    with KvEventSubscriber(index, [source], config=PATIENT):
        pub = Publisher(endpoint, replay, topic="kv-events", replay_topic=False)
        try:
            join(pub, index, R, batches[0])
            pub.publish(batches[1], drop=True)
            for b in batches[2:]:
                pub.publish(b)
            wait_for(lambda: index.counters(R).batches_applied == 5, what="five batches applied")
        finally:
            pub.close()
    assert held(index) == FINAL
    c = index.status(R)
    assert (c.counters["gaps_healed"], c.counters["malformed"], c.resyncs) == (1, 0, {})


def test_an_engine_restart_on_the_same_endpoint_is_detected(tmp_path: Path) -> None:
    endpoint, replay = f"ipc://{tmp_path}/kv.pub", f"ipc://{tmp_path}/kv.replay"
    index = ResidencyIndex()
    batches = history()
    sub = KvEventSubscriber(index, [EventSource(R, endpoint, replay_endpoint=replay, model=MODEL)], config=PATIENT)
    with sub:
        pub = Publisher(endpoint, replay)
        try:
            join(pub, index, R, batches[0])
            for b in batches[1:]:
                pub.publish(b)
            wait_for(lambda: index.counters(R).batches_applied == 5)
        finally:
            pub.close()
        assert held(index) == FINAL
        # a new process on the same endpoints: numbering starts again at 0
        pub = Publisher(endpoint, replay)
        try:
            fresh = pack([stored("B", 0, 3, "positional")], ts=50.0)
            join(pub, index, R, fresh)
            wait_for(lambda: index.counters(R).restarts == 1, what="the restart")
            wait_for(lambda: held(index) == {"A": 0, "B": 4, "C": 0}, what="the new process's blocks")
        finally:
            pub.close()
    assert any(n.startswith("restart:") for n in index.status(R).notes)


def test_malformed_messages_are_counted_and_the_thread_keeps_going(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/kv.pub"
    index = ResidencyIndex()
    batches = history()
    with KvEventSubscriber(index, [EventSource(R, endpoint, model=MODEL)], config=PATIENT):
        pub = Publisher(endpoint, None)
        try:
            join(pub, index, R, batches[0])
            pub.send_raw([b"", b"\x00" * 7, batches[1]])  # a 7-byte sequence number
            pub.send_raw([b"", b"only two frames"])
            pub.publish(b"\x92\xc0")  # seq 1: [nil, ...] is not a batch
            for b in batches[1:]:
                pub.publish(b)  # seqs 2..5
            wait_for(lambda: index.status(R).last_seq == 5, what="the last batch")
        finally:
            pub.close()
    c = index.status(R)
    assert (c.counters["malformed"], c.counters["undecodable"], c.resyncs) == (2, 1, {"undecodable": 1})
    # batch "1" came after the resync; 2..4 hold B, remove blocks it no longer knows, store C
    assert held(index) == {"A": 0, "B": 2, "C": 2}


def test_prometheus_metrics(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    endpoint = f"ipc://{tmp_path}/kv.pub"
    index = ResidencyIndex()
    index.add_replica("r1")  # no events: reported as not live
    registry = CollectorRegistry()
    register_metrics(registry, index)
    with KvEventSubscriber(index, [EventSource(R, endpoint, model=MODEL)], config=PATIENT):
        pub = Publisher(endpoint, None)
        try:
            join(pub, index, R, history()[0])
            wait_for(lambda: index.counters(R).batches_applied == 1)
        finally:
            pub.close()
    text = generate_latest(registry).decode()
    for line in (
        'prefixplan_kv_event_batches_applied_total{replica="r0"} 1.0',
        'prefixplan_kv_events_applied_total{replica="r0"} 1.0',
        'prefixplan_kv_event_gaps_total{replica="r0"} 0.0',
        'prefixplan_kv_event_undecodable_total{replica="r0"} 0.0',
        'prefixplan_kv_events_live{replica="r0"} 1.0',
        'prefixplan_kv_events_live{replica="r1"} 0.0',
        'prefixplan_kv_resident_blocks{replica="r0",tier="GPU"} 2.0',
    ):
        assert line in text, line
    assert 'prefixplan_kv_event_batches_received_total{replica="r0",via="live"}' in text


def test_a_bind_that_fails_is_raised_by_start(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        sub = KvEventSubscriber(ResidencyIndex(), [EventSource(R, f"tcp://127.0.0.1:{port}", bind=True)])
        with pytest.raises(Exception, match="[Aa]ddress"):
            sub.start()
