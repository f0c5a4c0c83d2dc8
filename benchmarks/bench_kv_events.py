"""KV events applied per second by the residency index (``prefixplan.residency``).

    python benchmarks/bench_kv_events.py                        # every shape, in-process and over ipc
    python benchmarks/bench_kv_events.py --batches 50000 --no-sockets

A synthetic engine (an LRU prefix cache over prompts that share heads) publishes one batch per
request: a ``BlockStored`` of the blocks the request added and one ``BlockRemoved`` per evicted
block, as vLLM does. The batches are encoded beforehand (not timed). Three ways of applying them,
each timed on its own:

* ``decode``  -- :func:`~prefixplan.residency.decode.decode_batch` alone (msgpack and checks);
* ``stream``  -- :class:`~prefixplan.residency.stream.ReplicaStream` (decode, sequence checks,
  keying by token content, the index), what the subscriber's thread does per batch;
* ``sockets`` -- the same through real ZMQ sockets: a PUB on an ipc endpoint sending as fast as it
  can (high-water mark off), the subscriber's thread receiving; timed from the first send until the
  index has applied the last batch.

Shapes: vLLM on GPUs (16-token blocks), the CPU build (128-token blocks), each in the tagged-map
encoding of vLLM 0.32 and the positional arrays of earlier releases. Figures are for the machine
it runs on (one core of it: the index is single-threaded).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import OrderedDict
from typing import Any

import msgpack

from prefixplan.residency.decode import decode_batch
from prefixplan.residency.index import ResidencyIndex
from prefixplan.residency.stream import ReplicaStream, StreamConfig


def synthetic_batches(n: int, *, block_size: int, encoding: str, seed: int = 7) -> tuple[list[bytes], int, int]:
    """``n`` encoded batches of a synthetic engine, the events they hold and the block hashes those
    events name (stored and removed)."""
    rng = random.Random(seed)
    heads = [[rng.randrange(150_000) for _ in range(block_size * 8)] for _ in range(16)]
    capacity = 4096
    cached: OrderedDict[int, None] = OrderedDict()
    ids: dict[tuple[int, ...], int] = {}
    out: list[bytes] = []
    events_total = blocks_total = 0
    for _ in range(n):
        head = rng.choice(heads)[: block_size * rng.randrange(1, 9)]
        tokens = head + [rng.randrange(150_000) for _ in range(block_size * rng.randrange(1, 9))]
        nb = len(tokens) // block_size
        hashes = [ids.setdefault(tuple(tokens[: (i + 1) * block_size]), len(ids) + 1) for i in range(nb)]
        miss = next((i for i, h in enumerate(hashes) if h not in cached), nb)
        events: list[Any] = []
        if miss < nb:
            blocks_total += nb - miss
            fields: dict[str, Any] = {
                "block_hashes": hashes[miss:],
                "parent_block_hash": hashes[miss - 1] if miss else None,
                "token_ids": tokens[miss * block_size : nb * block_size],
                "block_size": block_size,
                "lora_id": None,
                "medium": "GPU",
                "lora_name": None,
            }
            if encoding == "tagged":
                events.append({"type": "BlockStored", **fields, "extra_keys": [None] * (nb - miss), "group_idx": 0})
            else:
                events.append(["BlockStored", *fields.values()])
        for h in hashes:
            cached[h] = None
            cached.move_to_end(h)
        while len(cached) > capacity:
            victim, _ = cached.popitem(last=False)
            blocks_total += 1
            if encoding == "tagged":
                events.append({"type": "BlockRemoved", "block_hashes": [victim], "medium": "GPU", "group_idx": 0})
            else:
                events.append(["BlockRemoved", [victim], "GPU"])
        events_total += len(events)
        out.append(msgpack.packb([time.time(), events, 0], use_bin_type=True))
    return out, events_total, blocks_total


def bench_decode(batches: list[bytes]) -> float:
    t0 = time.perf_counter()
    for p in batches:
        decode_batch(p)
    return time.perf_counter() - t0


def bench_stream(batches: list[bytes]) -> tuple[float, ResidencyIndex]:
    index = ResidencyIndex()
    index.add_replica("r0", source="bench", model="bench")
    stream = ReplicaStream("r0", index, replay=False, config=StreamConfig(probe_interval=None))
    t0 = time.perf_counter()
    for seq, p in enumerate(batches):
        stream.on_live(seq, p, 0.0)
    return time.perf_counter() - t0, index


def bench_sockets(batches: list[bytes], timeout: float = 600.0) -> float:
    import zmq

    from prefixplan.residency.subscriber import EventSource, KvEventSubscriber

    with tempfile.TemporaryDirectory() as tmp:
        endpoint = f"ipc://{tmp}/bench.pub"
        ctx = zmq.Context()
        pub = ctx.socket(zmq.PUB)
        pub.setsockopt(zmq.SNDHWM, 0)
        pub.bind(endpoint)
        index = ResidencyIndex()
        sub = KvEventSubscriber(
            index, [EventSource("r0", endpoint, model="bench")], config=StreamConfig(probe_interval=None)
        )
        sub.start()
        try:
            # the subscription is up once a batch sent again and again arrives (seq 0, then dropped
            # as duplicates); the run proper starts at seq 1
            warm = msgpack.packb([0.0, [], 0])
            while index.counters("r0").batches_received == 0:
                pub.send_multipart([b"", (0).to_bytes(8, "big"), warm])
                time.sleep(0.01)
            last = len(batches)
            t0 = time.perf_counter()
            for seq, p in enumerate(batches, start=1):
                pub.send_multipart([b"", seq.to_bytes(8, "big"), p])
            deadline = time.monotonic() + timeout
            while index.status("r0").last_seq != last:
                if time.monotonic() > deadline:
                    raise TimeoutError("the subscriber did not apply every batch")
                time.sleep(0.001)
            elapsed = time.perf_counter() - t0
        finally:
            sub.stop()
            pub.close(linger=0)
            ctx.term()
    assert index.counters("r0").batches_applied == len(batches) + 1
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=20_000)
    ap.add_argument("--no-sockets", action="store_true", help="skip the run over ZMQ sockets")
    args = ap.parse_args()
    shapes = [(16, "tagged"), (16, "positional"), (128, "tagged"), (128, "positional")]
    print(f"{args.batches:,} batches per shape (one request each: its new blocks stored, evictions removed)")
    header = f"{'block':>5} {'encoding':<10} {'events':>8} {'blocks':>9} {'way':<8} {'batches/s':>10} {'events/s':>10} {'blocks/s':>11}"
    print(header)
    print("-" * len(header))
    for bs, enc in shapes:
        batches, events, blocks = synthetic_batches(args.batches, block_size=bs, encoding=enc)
        runs = [("decode", bench_decode(batches))]
        elapsed, index = bench_stream(batches)
        runs.append(("stream", elapsed))
        c = index.counters("r0")
        if not args.no_sockets:
            runs.append(("sockets", bench_sockets(batches)))
        for way, secs in runs:
            print(
                f"{bs:>5} {enc:<10} {events:>8,} {blocks:>9,} {way:<8} {len(batches) / secs:>10,.0f} "
                f"{events / secs:>10,.0f} {blocks / secs:>11,.0f}"
            )
        assert c.batches_applied == len(batches) and c.orphan_blocks == 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
