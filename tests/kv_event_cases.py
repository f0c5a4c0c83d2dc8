"""KV event payloads for the residency tests: both encodings, a small engine history, the cases
(gap, duplicate, reordered batch, restart, ...) with the index each must leave, and a publisher
that speaks vLLM's wire protocol (PUB + replay ROUTER) over real ZMQ sockets.

Shapes follow vLLM's ``vllm/distributed/kv_events.py``: 0.32 sends tagged maps (msgspec
``tag=True``, defaults omitted), earlier releases and SGLang positional arrays whose first element
is the tag; a batch is ``[ts, [event, ...], data_parallel_rank]``.
"""

from __future__ import annotations

import random
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import msgpack

from tests.gateway_harness import wait_for as wait_for  # the residency tests poll with it too

END = (0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "big")
MODEL = "tiny"
BS = 4  # block size of the synthetic history


def tagged_stored(hashes, parent, tokens, block_size, *, medium="GPU", group=0, lora_name=None, extra_keys=None):
    ev: dict[str, Any] = {
        "type": "BlockStored",
        "block_hashes": list(hashes),
        "parent_block_hash": parent,
        "token_ids": list(tokens),
        "block_size": block_size,
        "lora_id": None,
        "medium": medium,
        "lora_name": lora_name,
    }
    if extra_keys is not None:
        ev["extra_keys"] = extra_keys
    if group is not None:
        ev["group_idx"] = group
    return ev


def positional_stored(hashes, parent, tokens, block_size, *, medium="GPU"):
    return ["BlockStored", list(hashes), parent, list(tokens), block_size, None, medium]


def tagged_removed(hashes, *, medium="GPU", group=0):
    return {"type": "BlockRemoved", "block_hashes": list(hashes), "medium": medium, "group_idx": group}


def positional_removed(hashes, *, medium="GPU"):
    return ["BlockRemoved", list(hashes), medium]


def cleared(encoding: str = "tagged"):
    return {"type": "AllBlocksCleared"} if encoding == "tagged" else ["AllBlocksCleared"]


def pack(events: list, ts: float = 1.0, rank: int | None = 0) -> bytes:
    return msgpack.packb([ts, events, rank], use_bin_type=True)


# --- a small engine history: prompts A, B, C of 4 blocks of 4 tokens ------------------------------

PROMPTS = {name: [base + i for i in range(4 * BS)] for name, base in (("A", 1000), ("B", 2000), ("C", 3000))}


def h(prompt: str, block: int) -> bytes:
    """The engine's (opaque) hash of a block."""
    return f"{prompt}{block}".encode()


def stored(prompt: str, first: int, last: int, encoding: str) -> Any:
    tokens = PROMPTS[prompt][first * BS : (last + 1) * BS]
    hashes = [h(prompt, i) for i in range(first, last + 1)]
    parent = h(prompt, first - 1) if first else None
    make = tagged_stored if encoding == "tagged" else positional_stored
    return make(hashes, parent, tokens, BS)


def removed(hashes: list, encoding: str) -> Any:
    return tagged_removed(hashes) if encoding == "tagged" else positional_removed(hashes)


def history(encoding: str = "tagged") -> list[bytes]:
    """Batches 0..4 of one engine. After all five it holds A0 A1, B0 B1, C0 C1."""
    return [
        pack([stored("A", 0, 1, encoding)], ts=1.0),
        pack([stored("A", 2, 3, encoding)], ts=2.0),
        pack([stored("B", 0, 2, encoding)], ts=3.0),
        pack([removed([h("A", 3), h("A", 2)], encoding)], ts=4.0),
        pack([stored("C", 0, 1, encoding), removed([h("B", 2)], encoding)], ts=5.0),
    ]


def mixed_history() -> list[bytes]:
    """The same history, even batches tagged maps and odd ones positional arrays."""
    tagged, positional = history("tagged"), history("positional")
    return [tagged[i] if i % 2 == 0 else positional[i] for i in range(5)]


FINAL = {"A": 2, "B": 2, "C": 2}  # blocks of each prompt resident after the whole history


@dataclass
class Case:
    """Deliveries to one replica's stream and what the index must hold afterwards.

    A delivery is ``("live", seq)``, ``("replay", seq)``, ``("end",)``, ``("tick", seconds)``, or
    ``("raw", seq, payload)`` (a live batch with that payload); ``asks`` are the replay starts the
    stream must request, in order (its join request excluded).
    """

    name: str
    deliveries: list[tuple]
    expected: dict[str, int]  # prompt -> leading blocks resident
    replay: bool = False
    asks: list[int] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    resyncs: dict[str, int] = field(default_factory=dict)
    encoding: str = "tagged"


def _live(*seqs: int) -> list[tuple]:
    return [("live", s) for s in seqs]


RESTART = pack([stored("C", 0, 1, "tagged")], ts=9.0)  # a new engine's first batch (seq 0)

CASES = [
    Case("tagged maps in order", _live(0, 1, 2, 3, 4), FINAL, counters={"batches_applied": 5}),
    Case("positional arrays in order", _live(0, 1, 2, 3, 4), FINAL, encoding="positional"),
    Case("both encodings mixed", _live(0, 1, 2, 3, 4), FINAL, encoding="mixed"),
    Case("duplicate batch", _live(0, 1, 1, 2, 3, 3, 4), FINAL, counters={"duplicates": 2, "batches_applied": 5}),
    Case(
        "reordered batch",
        _live(0, 2, 1, 3, 4),
        FINAL,
        counters={"reordered": 1, "gaps": 1, "gaps_healed": 1, "batches_applied": 5},
    ),
    Case(
        "reordered batch, replay asked meanwhile",
        [*_live(0, 2, 1), ("replay", 1), ("replay", 2), ("end",), *_live(3, 4)],
        FINAL,
        replay=True,
        asks=[1],
        counters={"reordered": 1, "gaps": 1, "gaps_healed": 1, "batches_applied": 5},
    ),
    Case(
        "gap healed by the replay endpoint",
        [*_live(0, 1, 3, 4), ("replay", 2), ("replay", 3), ("replay", 4), ("end",)],
        FINAL,
        replay=True,
        asks=[2],
        counters={"gaps": 1, "gaps_healed": 1, "batches_applied": 5, "batches_replayed": 3},
    ),
    Case(
        # without a replay endpoint batch 2 is lost for good: the index is cleared and re-learns
        # from batch 3 (whose removals it cannot resolve) and 4
        "gap without a replay endpoint",
        [*_live(0, 1, 3, 4), ("tick", 5.0)],
        {"A": 0, "B": 0, "C": 2},
        counters={"gaps": 1, "gaps_healed": 0, "batches_applied": 4, "unresolved_removals": 3},
        resyncs={"gap-no-replay": 1},
    ),
    Case(
        "replay buffer no longer holds the gap",
        [*_live(0, 1, 4), ("replay", 3), ("replay", 4), ("end",)],
        {"A": 0, "B": 0, "C": 2},
        replay=True,
        asks=[2],
        resyncs={"replay-short": 1},
    ),
    Case(
        "replay never answers",
        [*_live(0, 1, 3, 4), ("tick", 60.0)],
        {"A": 0, "B": 0, "C": 2},
        replay=True,
        asks=[2],
        counters={"replay_timeouts": 1},
        resyncs={"replay-timeout": 1},
    ),
    Case(
        "engine restart (sequence back to 0)",
        [*_live(0, 1, 2), ("raw", 0, RESTART)],
        {"A": 0, "B": 0, "C": 2},
        counters={"restarts": 1},
    ),
    Case(
        "AllBlocksCleared",
        [*_live(0, 1, 2), ("raw", 3, pack([cleared(), stored("C", 0, 1, "tagged")]))],
        {"A": 0, "B": 0, "C": 2},
        counters={"clears": 1},
    ),
    Case(
        "undecodable batch",
        [*_live(0, 1), ("raw", 2, b"\xc1 not msgpack"), *_live(3, 4)],
        {"A": 0, "B": 0, "C": 2},
        counters={"undecodable": 1, "batches_applied": 4},
        resyncs={"undecodable": 1},
    ),
]


def payloads(encoding: str) -> list[bytes]:
    return mixed_history() if encoding == "mixed" else history(encoding)


# --- a publisher on real sockets (vLLM's wire protocol) -------------------------------------------


class Publisher:
    """PUB (bound or connected by vLLM's rule) plus a replay ROUTER served on its own thread."""

    def __init__(
        self, endpoint: str, replay_endpoint: str | None, topic: str = "", *, replay_topic: bool = True
    ) -> None:
        """``replay_topic=False`` answers replays as SGLang's publisher does (no topic frame)."""
        import zmq

        from prefixplan.residency.subscriber import engine_binds

        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        if engine_binds(endpoint):
            self.pub.bind(endpoint)
        else:
            self.pub.connect(endpoint)
        self.topic = topic.encode()
        self.replay_topic = replay_topic
        self.seq = 0
        self.buffer: list[tuple[int, bytes]] = []
        self.lock = threading.Lock()
        self.replay_requests: list[int] = []
        self._stop = threading.Event()
        self._thread = None
        if replay_endpoint:
            self.router = self.ctx.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            self.router.bind(replay_endpoint)
            self._thread = threading.Thread(target=self._serve, daemon=True)
            self._thread.start()

    def publish(self, payload: bytes, *, drop: bool = False) -> int:
        """Send the next batch (``drop``: keep it only in the replay buffer, as if lost)."""
        with self.lock:
            seq = self.seq
            self.seq += 1
            self.buffer.append((seq, payload))
        if not drop:
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    def send_raw(self, frames: list[bytes]) -> None:
        self.pub.send_multipart(frames)

    def _serve(self) -> None:
        import zmq

        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(20):
                continue
            frames = self.router.recv_multipart()
            if len(frames) != 3:
                continue
            client, _, start = frames
            first = int.from_bytes(start, "big")
            self.replay_requests.append(first)
            with self.lock:
                batches = [(s, p) for s, p in self.buffer if s >= first]
            head = [client, b"", self.topic] if self.replay_topic else [client, b""]
            for s, p in batches:
                self.router.send_multipart([*head, s.to_bytes(8, "big"), p])
            self.router.send_multipart([*head[:2], b"", END, b""] if self.replay_topic else [*head, END, b""])

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self.router.close(linger=0)
        self.pub.close(linger=0)
        self.ctx.term()


# --- a small engine with an LRU prefix cache, publishing what it stores and evicts -------------------


class FakeEngine:
    """Prompts from a pool that shares prefixes; full blocks cached, least recently used evicted
    (one ``BlockRemoved`` per block), now and then a reset; each request's events are one batch,
    each event in either encoding. ``cached`` maps engine hash -> the tokens up to its block's end."""

    def __init__(self, seed: int, *, block_size: int = 4, capacity: int = 24, pool: int = 6) -> None:
        self.rng = random.Random(seed)
        self.bs = block_size
        self.capacity = capacity
        heads = [[self.rng.randrange(50_000) for _ in range(block_size * 3)] for _ in range(2)]
        self.pool = [
            self.rng.choice(heads)
            + [
                self.rng.randrange(50_000)
                for _ in range(block_size * self.rng.randrange(1, 4) + self.rng.randrange(block_size))
            ]
            for _ in range(pool)
        ]
        self.cached: OrderedDict[int, tuple[int, ...]] = OrderedDict()
        self._ids: dict[tuple[int, ...], int] = {}

    def _hash(self, prefix: tuple[int, ...]) -> int:
        return self._ids.setdefault(prefix, 10_000 + len(self._ids))

    def _enc(self) -> str:
        return self.rng.choice(["tagged", "positional"])

    def request(self) -> bytes:
        if self.rng.random() < 0.03:
            self.cached.clear()
            return pack([cleared(self._enc())])
        tokens = self.rng.choice(self.pool)
        n = len(tokens) // self.bs
        hashes = [self._hash(tuple(tokens[: (i + 1) * self.bs])) for i in range(n)]
        miss = next((i for i, x in enumerate(hashes) if x not in self.cached), n)
        for x in hashes[:miss]:
            self.cached.move_to_end(x)
        events: list[Any] = []
        if miss < n:
            new = hashes[miss:]
            make = tagged_stored if self._enc() == "tagged" else positional_stored
            parent = hashes[miss - 1] if miss else None
            events.append(make(new, parent, tokens[miss * self.bs : n * self.bs], self.bs))
            for i, x in enumerate(new, start=miss):
                self.cached[x] = tuple(tokens[: (i + 1) * self.bs])
                self.cached.move_to_end(x)
        keep = set(hashes)
        for victim in [x for x in self.cached if x not in keep][: max(0, len(self.cached) - self.capacity)]:
            del self.cached[victim]
            events.append(removed([victim], self._enc()))
        return pack(events)


def join(pub: Publisher, index: Any, replica: str, payload: bytes, limit: float = 60.0) -> None:
    """Publish ``payload``, then send it again (a duplicate, as the protocol allows) until a live
    copy arrived and the batch is applied: from then on the subscription is up, the stream has
    joined (its join replay answered) and nothing published is lost to it. ``limit`` bounds the
    wait for the sockets to connect; it measures nothing."""
    import time

    before = index.counters(replica).batches_received
    seq = pub.publish(payload)
    frames = [pub.topic, seq.to_bytes(8, "big"), payload]
    deadline = time.monotonic() + limit
    while index.counters(replica).batches_received == before or index.status(replica).last_seq != seq:
        if time.monotonic() > deadline:
            raise AssertionError("the subscription never came up")
        pub.send_raw(frames)
        time.sleep(0.05)
