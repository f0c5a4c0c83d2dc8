"""The residency index: both event encodings decode to the same events, blocks are keyed by token
content with the trace's own block key (whatever way the engine splits a prompt into events),
removals resolve through the engine hash, and media, cache groups and namespaces stay apart; batches
recorded from vLLM 0.32 (tests/data/kv_events) give exactly the prompts' blocks, re-encoded as
positional arrays too."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("msgpack")

import msgpack

from prefixplan.core.types import namespace_key
from prefixplan.residency.decode import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    UndecodablePayload,
    decode_batch,
)
from prefixplan.residency.index import ResidencyIndex
from prefixplan.trace.blockhash import BlockHasher, namespace_seed
from tests.kv_event_cases import (
    cleared,
    pack,
    positional_removed,
    positional_stored,
    tagged_removed,
    tagged_stored,
)

R = "r0"


def _index(model: str | None = "m") -> ResidencyIndex:
    index = ResidencyIndex()
    index.add_replica(R, source="test", model=model)
    return index


def _chunks(tokens: list[int], bs: int, splits: list[int], *, tagged: bool = True, prefix: str = "x"):
    """BlockStored events for ``tokens`` cut after the given block counts (engine hashes made up)."""
    events, parent, start = [], None, 0
    for n in splits:
        hashes = [f"{prefix}{start + i}".encode() for i in range(n)]
        toks = tokens[start * bs : (start + n) * bs]
        events.append((tagged_stored if tagged else positional_stored)(hashes, parent, toks, bs))
        parent, start = hashes[-1], start + n
    return events


def test_both_encodings_decode_to_the_same_events() -> None:
    toks = list(range(100, 108))
    tagged = decode_batch(pack([tagged_stored([1, 2], None, toks, 4), tagged_removed([2]), cleared("tagged")]))
    positional = decode_batch(
        pack([positional_stored([1, 2], None, toks, 4), positional_removed([2]), cleared("positional")])
    )
    assert [type(e) for e in tagged.events] == [BlockStored, BlockRemoved, AllBlocksCleared]
    for a, b in zip(tagged.events, positional.events, strict=True):
        if isinstance(a, BlockStored):
            assert isinstance(b, BlockStored)
            assert (a.block_hashes, a.parent, a.block_size, a.medium, a.group) == (
                b.block_hashes,
                b.parent,
                b.block_size,
                b.medium,
                b.group,
            )
            assert a.token_ids.tolist() == b.token_ids.tolist() == toks
        else:
            assert a == b


def test_older_and_newer_positional_shapes_decode() -> None:
    # vLLM before `medium` (5 fields after the tag), and one with fields this code does not know
    old = ["BlockStored", [7], None, [1, 2, 3, 4], 4, None]
    new = ["BlockStored", [7], None, [1, 2, 3, 4], 4, None, "CPU", None, None, 1, "full", None, "LOCAL", None, "s"]
    a, b = decode_batch(pack([old, new])).events
    assert isinstance(a, BlockStored) and isinstance(b, BlockStored)
    assert (a.medium, a.group) == ("GPU", 0)
    assert (b.medium, b.group) == ("CPU", 1)


def test_unknown_event_types_are_skipped_and_counted() -> None:
    batch = decode_batch(pack([{"type": "BlockReused", "block_hashes": [1]}, ["Heartbeat"], cleared()]))
    assert batch.unknown == 2 and len(batch.events) == 1


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # never used in msgpack
        b"\x91\x01",  # [1]: no event list
        b"\x93\xa1x\x90\x00",  # ts is a string
        pack([tagged_stored([1], None, [1, 2, 3], 4)]),  # 3 tokens for one block of 4
        pack([tagged_stored([[1]], None, [1, 2, 3, 4], 4)]),  # an unhashable block hash
        pack([tagged_stored([1], None, [1, 2, -3, 4], 4)]),  # a negative token id
        pack([tagged_stored([1], None, [1, 2, 3, 4], 0)]),
        pack([{"type": "BlockRemoved", "block_hashes": []}]),
        pack([["BlockStored"]]),
        pack([7]),
    ],
)
def test_malformed_payloads_are_undecodable(payload: bytes) -> None:
    with pytest.raises(UndecodablePayload):
        decode_batch(payload)


@pytest.mark.parametrize("seed", range(6))
def test_keys_from_events_equal_the_trace_keys_however_the_prompt_is_split(seed: int) -> None:
    rng = np.random.default_rng(seed)
    bs = int(rng.choice([4, 16, 128]))
    nb = int(rng.integers(1, 12))
    tokens = rng.integers(0, 151_000, size=nb * bs + int(rng.integers(0, bs))).tolist()
    splits: list[int] = []
    while sum(splits) < nb:
        splits.append(int(rng.integers(1, nb - sum(splits) + 1)))
    index = _index("tiny-qwen3")
    index.apply(R, decode_batch(pack(_chunks(tokens, bs, splits, tagged=bool(seed % 2)))))
    trace = BlockHasher().block_keys(
        np.asarray(tokens, dtype=np.uint32), namespace_seed(namespace_key("tiny-qwen3")), bs
    )
    assert index.resident_keys(R) == set(trace.tolist())
    assert index.prompt_keys(tokens, bs, model="tiny-qwen3") == trace.tolist()
    assert index.resident_prefix_blocks(R, trace) == nb
    assert index.block_size(R) == bs


def test_lora_and_cache_salt_are_the_namespace_and_multimodal_blocks_never_match() -> None:
    toks = list(range(500, 516))
    index = _index()
    salted = tagged_stored([1, 2], None, toks[:8], 4, lora_name="ad", extra_keys=[["ad", "tenant-1"], ["ad"]])
    index.apply(R, decode_batch(pack([salted])))
    keys = index.prompt_keys(toks, 4, model="m", lora="ad", cache_salt="tenant-1")
    assert index.resident_prefix_blocks(R, keys) == 2
    assert index.resident_prefix_blocks(R, index.prompt_keys(toks, 4, model="m")) == 0
    assert index.resident_prefix_blocks(R, index.prompt_keys(toks, 4, model="m", lora="ad")) == 0
    # an image in block 1: that block and its children are keyed apart from the plain tokens
    index = _index()
    mm = tagged_stored([1, 2, 3], None, toks[:12], 4, extra_keys=[None, [["img-hash", 0]], None])
    index.apply(R, decode_batch(pack([mm])))
    assert index.resident_prefix_blocks(R, index.prompt_keys(toks, 4, model="m")) == 1
    assert len(index.resident_keys(R)) == 3


def test_removals_resolve_through_the_engine_hash() -> None:
    toks = list(range(16))
    index = _index()
    index.apply(R, decode_batch(pack(_chunks(toks, 4, [2, 2]))))
    keys = index.prompt_keys(toks, 4, model="m")
    assert index.holds(R, keys)
    index.apply(R, decode_batch(pack([tagged_removed([b"x2"])])))
    assert index.resident_prefix_blocks(R, keys) == 2  # stops at the first missing block
    assert not index.holds(R, keys)
    assert index.holds(R, keys[:2])
    # the same content under a second engine hash (e.g. two hash algorithms): held until both go
    index.apply(R, decode_batch(pack([tagged_stored([b"y0"], None, toks[:4], 4)])))
    index.apply(R, decode_batch(pack([tagged_removed([b"x0"])])))
    assert index.resident_prefix_blocks(R, keys) == 2
    index.apply(R, decode_batch(pack([tagged_removed([b"y0", b"never-stored"])])))
    assert index.resident_prefix_blocks(R, keys) == 0
    assert index.counters(R).unresolved_removals == 1


def test_a_block_announced_again_is_held_once() -> None:
    toks = list(range(8))
    index = _index()
    batch = decode_batch(pack(_chunks(toks, 4, [2])))
    index.apply(R, batch)
    index.apply(R, batch)  # vLLM re-announces reused prefix blocks
    index.apply(R, decode_batch(pack([tagged_removed([b"x0", b"x1"])])))
    assert index.resident_keys(R) == frozenset()


def test_a_block_whose_parent_is_unknown_is_counted_not_guessed() -> None:
    index = _index()
    index.apply(R, decode_batch(pack([tagged_stored([b"c"], b"unknown-parent", [1, 2, 3, 4], 4)])))
    assert index.resident_keys(R) == frozenset()
    assert index.counters(R).orphan_blocks == 1


def test_media_and_groups_are_separate_tiers() -> None:
    toks = list(range(12))
    index = _index()
    gpu = _chunks(toks, 4, [3])
    # the offloaded copy of block 2 on the CPU: its parent is found on the GPU
    cpu = tagged_stored([b"x2"], b"x1", toks[8:12], 4, medium="CPU")
    other_group = tagged_stored([b"g0"], None, toks[:4], 4, group=1)
    index.apply(R, decode_batch(pack([*gpu, cpu, other_group])))
    keys = index.prompt_keys(toks, 4, model="m")
    assert index.resident_prefix_blocks(R, keys) == 3
    assert index.resident_keys(R, medium="CPU") == {keys[2]}
    assert index.resident_prefix_blocks(R, keys, medium="CPU") == 0  # block 0 is not on the CPU
    assert index.resident_prefix_blocks(R, keys, group=1) == 1
    index.apply(R, decode_batch(pack([tagged_removed([b"x2"], medium="CPU")])))
    assert index.resident_prefix_blocks(R, keys) == 3
    assert index.status(R).resident_blocks == {"GPU": 3, "CPU": 0, "GPU/g1": 1}
    index.apply(R, decode_batch(pack([cleared()])))
    assert index.status(R).resident_blocks == {}


def test_a_replica_without_events_says_so() -> None:
    index = ResidencyIndex()
    index.add_replica("quiet")
    index.add_replica("waiting", source="connects to tcp://10.0.0.2:5557")
    assert index.status("quiet").describe() == "quiet: no KV events (no event source configured)"
    assert "no KV events received yet" in index.status("waiting").describe()
    assert not index.publishing("quiet") and not index.publishing("waiting")
    assert index.events_state("never-declared") == "off"
    assert index.resident_prefix_blocks("quiet", [1, 2]) == 0


RECORDED = Path(__file__).resolve().parent / "data" / "kv_events" / "vllm-0.32.0-cpu.json"
_POSITIONAL = {
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium"),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
}


def _as_positional(payload: bytes) -> bytes:
    """A recorded tagged-map batch re-encoded as the older releases did (positional arrays)."""
    ts, events, rank = msgpack.unpackb(payload)
    return pack([[e["type"], *(e.get(f) for f in _POSITIONAL[e["type"]])] for e in events], ts=ts, rank=rank)


@pytest.mark.parametrize("encoding", ["tagged (as recorded)", "positional"])
def test_recorded_vllm_batches_give_the_prompts_blocks(encoding: str) -> None:
    rec = json.loads(RECORDED.read_text())
    payloads = [bytes.fromhex(b["payload"]) for b in rec["batches"]]
    if encoding == "positional":
        payloads = [_as_positional(p) for p in payloads]
    model, bs = rec["served_model_name"], rec["block_size"]
    index = _index(model)
    a = index.prompt_keys(rec["prompt_a"], bs, model=model)
    b = index.prompt_keys(rec["prompt_b"], bs, model=model)
    assert (len(a), len(b), a[:2] == b[:2]) == (2, 3, True)
    index.apply(R, decode_batch(payloads[0]))
    assert index.resident_keys(R) == set(a)
    index.apply(R, decode_batch(payloads[1]))  # prompt_b's third block, chained to prompt_a's second
    assert index.resident_keys(R) == set(a) | set(b)
    assert index.holds(R, b) and index.resident_prefix_blocks(R, a) == 2
    index.apply(R, decode_batch(payloads[2]))  # AllBlocksCleared
    assert index.resident_keys(R) == frozenset()
    assert index.counters(R).orphan_blocks == 0
