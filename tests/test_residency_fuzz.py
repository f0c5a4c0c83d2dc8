"""Seeded fuzz of the KV event subscriber: thousands of mutated and random msgpack payloads never
crash it (each one that does not decode is counted as undecodable and noted, every other one is
applied), through the stream and through the real socket thread; and whatever order, duplication
and loss live delivery suffers, an engine's events healed through its replay endpoint leave
exactly the blocks the engine holds."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

msgpack = pytest.importorskip("msgpack")

from prefixplan.residency.decode import UndecodablePayload, decode_batch  # noqa: E402
from prefixplan.residency.index import ResidencyIndex  # noqa: E402
from prefixplan.residency.stream import ReplicaStream, StreamConfig  # noqa: E402
from tests.kv_event_cases import (  # noqa: E402
    FakeEngine,
    Publisher,
    cleared,
    positional_removed,
    positional_stored,
    tagged_removed,
    tagged_stored,
    wait_for,
)

R = "r0"
ODD_VALUES: list[Any] = [
    None,
    True,
    -1,
    0,
    2**64 - 1,
    -(2**63),
    1.5,
    float("nan"),
    "",
    "GPU",
    b"",
    b"\x00" * 40,
    [],
    [[]],
    {},
    {"type": "BlockStored"},
    msgpack.ExtType(5, b"x"),
]


def _valid_events(rng: random.Random) -> list[Any]:
    toks = [rng.randrange(2**32) for _ in range(8)]
    return [
        tagged_stored([rng.randrange(2**64), b"h"], None, toks, 4),
        positional_stored([7], rng.randrange(100), toks[:4], 4),
        tagged_removed([b"h"]),
        positional_removed([7, 8], medium="CPU"),
        cleared(rng.choice(["tagged", "positional"])),
    ]


def _mutate(value: Any, rng: random.Random, depth: int = 0) -> Any:
    """A structural mutation: replace, drop, add or recurse into one element."""
    if depth > 3 or not isinstance(value, (list, dict)) or rng.random() < 0.2:
        return rng.choice(ODD_VALUES + [[value], {"x": value}])
    if isinstance(value, list):
        out = list(value)
        if not out or rng.random() < 0.2:
            out.append(rng.choice(ODD_VALUES))
        elif rng.random() < 0.2:
            del out[rng.randrange(len(out))]
        else:
            i = rng.randrange(len(out))
            out[i] = _mutate(out[i], rng, depth + 1)
        return out
    out_map = dict(value)
    keys = list(out_map)
    if not keys or rng.random() < 0.2:
        out_map[rng.choice(["type", "block_hashes", "token_ids", "extra", "group_idx"])] = rng.choice(ODD_VALUES)
    elif rng.random() < 0.2:
        del out_map[rng.choice(keys)]
    else:
        k = rng.choice(keys)
        out_map[k] = _mutate(out_map[k], rng, depth + 1)
    return out_map


def fuzz_payloads(seed: int, n: int) -> list[bytes]:
    rng = random.Random(seed)
    out: list[bytes] = []
    for _ in range(n):
        events = rng.sample(_valid_events(rng), rng.randrange(1, 4))
        batch: Any = [rng.random() * 1e9, events, rng.choice([0, None, 3])]
        kind = rng.random()
        if kind < 0.6:
            payload = msgpack.packb(_mutate(batch, rng), use_bin_type=True)
        elif kind < 0.75:  # bytes flipped or cut
            raw = bytearray(msgpack.packb(batch, use_bin_type=True))
            for _ in range(rng.randrange(1, 4)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            payload = bytes(raw[: rng.randrange(1, len(raw) + 1)])
        elif kind < 0.85:  # random bytes, and length prefixes that promise far more than follows
            payload = rng.choice([b"\xdd\xff\xff\xff\xff", b"\xdf\x7f\xff\xff\xff", b"\xc6\xff\xff\xff\xff"])
            payload += bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        elif kind < 0.9:  # nesting deeper than any batch
            payload = b"\x91" * rng.randrange(100, 5000) + b"\xc0"
        else:
            payload = msgpack.packb(batch, use_bin_type=True)  # some valid ones in between
        out.append(payload)
    return out


def _decodes(payload: bytes) -> bool:
    try:
        decode_batch(payload)
    except UndecodablePayload:
        return False
    return True


def _consistent(index: ResidencyIndex) -> None:
    for tier in index._replicas[R].tiers.values():
        assert sum(tier.keys.values()) == len(tier.by_hash)
        assert all(n > 0 for n in tier.keys.values())


@pytest.mark.parametrize("seed", [1, 2])
def test_fuzzed_payloads_never_crash_the_stream_and_are_counted(seed: int) -> None:
    payloads = fuzz_payloads(seed, 2500)
    bad = sum(not _decodes(p) for p in payloads)
    assert 0.5 * len(payloads) < bad < len(payloads)  # the run covers both outcomes
    index = ResidencyIndex()
    index.add_replica(R, source="fuzz", model="m")
    stream = ReplicaStream(R, index, replay=False)
    for seq, payload in enumerate(payloads):
        stream.on_live(seq, payload, 0.0)
        _consistent(index)
    status = index.status(R)
    assert status.counters["undecodable"] == bad
    assert status.counters["batches_applied"] == len(payloads) - bad
    assert status.resyncs == {"undecodable": bad}
    assert any("resync (undecodable): batch" in n for n in status.notes)
    print(f"seed {seed}: {len(payloads)} fuzzed payloads, {bad} undecodable (counted), {len(payloads) - bad} applied")


def test_fuzzed_payloads_through_the_socket_thread(tmp_path: Path) -> None:
    from prefixplan.residency.subscriber import EventSource, KvEventSubscriber

    payloads = fuzz_payloads(3, 400)
    bad = sum(not _decodes(p) for p in payloads)
    endpoint = f"ipc://{tmp_path}/fuzz.pub"
    index = ResidencyIndex()
    sub = KvEventSubscriber(index, [EventSource(R, endpoint, model="m")], config=StreamConfig(probe_interval=None))
    with sub:
        pub = Publisher(endpoint, None)
        try:
            first = msgpack.packb([0.0, [], 0])
            frames = [b"", (0).to_bytes(8, "big"), first]
            pub.seq = 1
            wait_for(lambda: pub.send_raw(frames) or index.counters(R).batches_received > 0, what="the subscription")
            for p in payloads:
                pub.publish(p)
            wait_for(lambda: index.status(R).last_seq == len(payloads), what="every fuzzed payload")
        finally:
            pub.close()
    assert sub._thread is None  # stopped cleanly, after staying up through all of them
    c = index.status(R).counters
    assert (c["undecodable"], c["batches_applied"], c["malformed"], c["errors"]) == (bad, len(payloads) - bad + 1, 0, 0)


@pytest.mark.parametrize("seed", range(12))
def test_any_delivery_order_healed_by_replay_leaves_what_the_engine_holds(seed: int) -> None:
    rng = random.Random(seed)
    engine = FakeEngine(seed, capacity=12, pool=10)
    batches = [engine.request() for _ in range(60)]
    index = ResidencyIndex()
    index.add_replica(R, source="fake", model="m")
    stream = ReplicaStream(R, index, replay=True, config=StreamConfig(probe_interval=60.0))
    # live delivery: some batches lost, some duplicated, neighbours swapped
    live: list[int] = []
    for seq in range(len(batches)):
        if rng.random() < 0.15:
            continue
        live.append(seq)
        if rng.random() < 0.1:
            live.append(seq)
    for i in range(len(live) - 1):
        if rng.random() < 0.15:
            live[i], live[i + 1] = live[i + 1], live[i]
    queue: list[tuple] = [("live", s) for s in live]
    asks = [stream.start(0.0)]
    published = 0  # batches the engine had published when the replay endpoint serves a request
    while queue or asks:
        if asks and (not queue or rng.random() < 0.3):  # the replay endpoint answers what it holds
            start = asks.pop(0)
            assert start is not None
            at = rng.randrange(len(queue) + 1)
            queue[at:at] = [("replay", s) for s in range(start, published)] + [("end",)]
            continue
        item = queue.pop(0)
        if item[0] == "live":
            published = min(len(batches), max(published, item[1] + 1 + rng.randrange(3)))
            ask = stream.on_live(item[1], batches[item[1]], 0.0)
        elif item[0] == "replay":
            ask = None
            stream.on_replay(item[1], batches[item[1]], 0.0)
        else:
            ask = stream.on_replay_end(0.0)
        if ask is not None:
            asks.append(ask)
    if stream.expected != len(batches):  # the tail was lost and nothing came after: the probe's job
        start = stream.tick(10_000.0)
        assert start == stream.expected
        for s in range(start, len(batches)):
            stream.on_replay(s, batches[s], 0.0)
        assert stream.on_replay_end(0.0) is None
    truth = {index.prompt_keys(list(prefix), engine.bs, model="m")[-1] for prefix in engine.cached.values()}
    assert index.resident_keys(R) == truth
    c = index.counters(R)
    assert (sum(c.resyncs.values()), c.restarts, c.orphan_blocks, c.undecodable) == (0, 0, 0, 0)
    assert c.batches_applied == len(batches)
