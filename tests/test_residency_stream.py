"""One replica's KV event stream, without sockets (a fake clock): each case of
tests/kv_event_cases.py (both encodings, a gap healed or not, a duplicate, a reordered batch, a
restart, ...) leaves exactly its expected index and counters; joining through the replay endpoint
and the idle probe learn what live delivery missed."""

from __future__ import annotations

import pytest

pytest.importorskip("msgpack")

from prefixplan.residency.index import ResidencyIndex
from prefixplan.residency.stream import ReplicaStream, StreamConfig
from tests.kv_event_cases import BS, CASES, FINAL, MODEL, PROMPTS, Case, history, pack, payloads, stored

R = "r0"


def index_for() -> ResidencyIndex:
    index = ResidencyIndex()
    index.add_replica(R, source="test", model=MODEL)
    return index


def held(index: ResidencyIndex) -> dict[str, int]:
    """Leading resident blocks of each prompt; asserts the index holds nothing else."""
    out = {p: index.resident_prefix_blocks(R, index.prompt_keys(t, BS, model=MODEL)) for p, t in PROMPTS.items()}
    assert len(index.resident_keys(R)) == sum(out.values())
    return out


def run_case(case: Case) -> tuple[ResidencyIndex, ReplicaStream, list[int]]:
    index = index_for()
    stream = ReplicaStream(R, index, replay=case.replay, config=StreamConfig(reorder_window=1.0, replay_timeout=5.0))
    batches = payloads(case.encoding)
    now = 0.0
    asks: list[int] = []
    if case.replay:
        assert stream.start(now) == 0  # joins through the replay endpoint; its buffer is empty here
        assert stream.on_replay_end(now) is None
    for d in case.deliveries:
        ask = None
        if d[0] == "live":
            ask = stream.on_live(d[1], batches[d[1]], now)
        elif d[0] == "raw":
            ask = stream.on_live(d[1], d[2], now)
        elif d[0] == "replay":
            stream.on_replay(d[1], batches[d[1]], now)
        elif d[0] == "end":
            ask = stream.on_replay_end(now)
        elif d[0] == "tick":
            now += d[1]
            ask = stream.tick(now)
        if ask is not None:
            asks.append(ask)
    return index, stream, asks


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_leaves_its_expected_index(case: Case) -> None:
    index, stream, asks = run_case(case)
    assert held(index) == case.expected
    assert asks == case.asks
    counters = index.counters(R).snapshot()
    assert {k: counters[k] for k in case.counters} == case.counters
    assert dict(index.counters(R).resyncs) == case.resyncs
    assert stream.pending == {}
    status = index.status(R)
    assert status.events == "live"
    # every resync and restart is reported in the replica's status, with its reason
    for reason in case.resyncs:
        assert any(f"resync ({reason})" in n for n in status.notes)
    if case.counters.get("restarts"):
        assert any(n.startswith("restart:") for n in status.notes)


def test_joining_through_the_replay_endpoint_learns_the_buffered_history() -> None:
    # started after the engine: the join replay returns batches 0..3 while batch 4 arrives live
    index = index_for()
    stream = ReplicaStream(R, index, replay=True)
    batches = history()
    assert stream.start(0.0) == 0
    assert stream.on_live(4, batches[4], 0.0) is None  # waits for the replay
    for seq in range(4):
        stream.on_replay(seq, batches[seq], 0.0)
    assert stream.on_replay_end(0.0) is None
    assert held(index) == FINAL
    c = index.counters(R)
    assert (c.gaps, c.batches_applied, sum(c.resyncs.values())) == (0, 5, 0)


def test_a_batch_lost_at_the_end_of_a_burst_is_found_by_the_idle_probe() -> None:
    index = index_for()
    stream = ReplicaStream(R, index, replay=True, config=StreamConfig(probe_interval=10.0))
    batches = history()
    stream.start(0.0)
    stream.on_replay_end(0.0)
    for seq in range(4):
        stream.on_live(seq, batches[seq], 1.0)  # batch 4 is lost: nothing after it reveals the loss
    assert stream.tick(5.0) is None
    assert stream.tick(10.5) == 4  # idle: ask for what may have been missed
    stream.on_replay(4, batches[4], 10.6)
    stream.on_replay_end(10.6)
    assert held(index) == FINAL
    # a probe that finds nothing changes nothing
    assert stream.tick(30.0) == 5
    stream.on_replay_end(30.1)
    assert held(index) == FINAL
    assert index.counters(R).replay_requests == 3


def test_a_restart_with_a_replay_endpoint_rejoins_from_zero() -> None:
    index = index_for()
    stream = ReplicaStream(R, index, replay=True)
    batches = history()
    stream.start(0.0)
    stream.on_replay_end(0.0)
    for seq in range(5):
        stream.on_live(seq, batches[seq], 0.0)
    new_life = [pack([stored("B", 0, 3, "tagged")], ts=20.0), pack([stored("C", 0, 0, "positional")], ts=21.0)]
    # the new process's batch 0 was missed; its batch 1 arrives: the sequence went back
    assert stream.on_live(1, new_life[1], 1.0) == 0
    assert held(index) == {"A": 0, "B": 0, "C": 0}
    stream.on_replay(0, new_life[0], 1.1)
    stream.on_replay(1, new_life[1], 1.1)
    stream.on_replay_end(1.1)
    assert held(index) == {"A": 0, "B": 4, "C": 1}
    assert index.counters(R).restarts == 1


def test_a_late_answer_to_an_abandoned_replay_is_ignored() -> None:
    index = index_for()
    stream = ReplicaStream(R, index, replay=True, config=StreamConfig(replay_timeout=2.0))
    batches = history()
    stream.start(0.0)
    stream.on_replay_end(0.0)
    stream.on_live(0, batches[0], 0.0)
    assert stream.on_live(2, batches[2], 0.0) == 1
    resets = stream.replay_resets
    stream.tick(3.0)  # unanswered: the subscriber replaces its replay socket
    assert stream.replay_resets == resets + 1
    stream.on_replay(1, batches[1], 3.1)  # an old answer arriving anyway
    assert index.counters(R).resyncs["replay-timeout"] == 1
    assert held(index) == {"A": 0, "B": 3, "C": 0}


def test_too_many_waiting_batches_resync() -> None:
    index = index_for()
    stream = ReplicaStream(R, index, replay=False, config=StreamConfig(max_pending=2))
    batches = history()
    stream.on_live(0, batches[0], 0.0)
    for seq in (2, 3, 4):
        stream.on_live(seq, batches[seq], 0.0)
    assert index.counters(R).resyncs == {"pending-overflow": 1}
    assert held(index) == {"A": 0, "B": 2, "C": 2}
    assert stream.pending == {}


def test_a_gap_that_opens_during_a_probe_is_asked_for_again_not_resynced() -> None:
    index = index_for()
    stream = ReplicaStream(R, index, replay=True, config=StreamConfig(probe_interval=30.0))
    batches = history()
    stream.start(0.0)
    stream.on_replay_end(0.0)
    stream.on_live(0, batches[0], 1.0)
    assert stream.tick(31.0) == 1  # idle probe
    assert stream.on_live(2, batches[2], 31.1) is None  # 1 lost; a replay is already in flight
    # the probe was served before batch 1 was published: it brings nothing, so ask again
    assert stream.on_replay_end(31.2) == 1
    stream.on_replay(1, batches[1], 31.3)
    stream.on_replay(2, batches[2], 31.3)
    assert stream.on_replay_end(31.3) is None
    c = index.counters(R)
    assert (c.gaps, c.gaps_healed, dict(c.resyncs)) == (1, 1, {})
    assert held(index) == {"A": 4, "B": 3, "C": 0}


def test_a_probe_that_times_out_with_a_gap_open_asks_for_the_gap_at_once() -> None:
    index = index_for()
    stream = ReplicaStream(R, index, replay=True, config=StreamConfig(probe_interval=30.0, replay_timeout=5.0))
    batches = history()
    stream.start(0.0)
    stream.on_replay_end(0.0)
    stream.on_live(0, batches[0], 1.0)
    assert stream.tick(31.0) == 1  # idle probe, never answered
    stream.on_live(2, batches[2], 32.0)
    resets = stream.replay_resets
    assert stream.tick(37.0) == 1  # the probe is given up (its socket replaced) and the gap asked for
    assert stream.replay_resets == resets + 1
    stream.on_replay(1, batches[1], 37.5)
    assert stream.on_replay_end(37.5) is None
    c = index.counters(R)
    assert (c.gaps, c.gaps_healed, c.replay_timeouts, dict(c.resyncs)) == (1, 1, 1, {})
    assert held(index) == {"A": 4, "B": 3, "C": 0}
