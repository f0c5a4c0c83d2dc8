"""Decoding the engines' KV event payloads (msgpack), in both encodings.

A payload is one batch ``[ts, [event, ...], data_parallel_rank]``. vLLM 0.32 sends each event as
a tagged map (``{"type": "BlockStored", "block_hashes": [...], ...}``); earlier vLLM releases
and SGLang send a positional array whose first element is the tag
(``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
lora_name, extra_keys, group_idx, ...]``, ``["BlockRemoved", block_hashes, medium, group_idx,
...]``, ``["AllBlocksCleared"]``); trailing fields may be missing or added. Both decode to
the same :class:`BlockStored`, :class:`BlockRemoved` and :class:`AllBlocksCleared`.

Anything else raises :class:`UndecodablePayload`: a payload that is not msgpack, a batch of the
wrong shape, or an event of a known type with a field of the wrong type or inconsistent lengths
(``token_ids`` must hold ``block_size`` tokens per hash). Events of an unknown type are skipped
and counted in :attr:`EventBatch.unknown` (a newer engine may add types).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

MEDIUM_GPU = "GPU"
EngineHash = Union[int, bytes, str]
"""An engine's block hash as published (an int, or the digest's bytes): opaque to prefixplan."""

_STORED_FIELDS = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
)
_REMOVED_FIELDS = ("block_hashes", "medium", "group_idx")
_MAX_TOKEN = (1 << 32) - 1


class UndecodablePayload(ValueError):
    """A KV event payload that cannot be decoded (the message says why)."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Blocks cached in one chain: ``token_ids`` holds ``block_size`` tokens per hash, the first
    block's parent is ``parent`` (None: the chain starts here)."""

    block_hashes: tuple[EngineHash, ...]
    parent: EngineHash | None
    token_ids: np.ndarray
    block_size: int
    medium: str
    group: int
    lora_name: str | None
    extra_keys: tuple[tuple[Any, ...] | None, ...] | None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks evicted from ``medium`` (their hashes, as stored)."""

    block_hashes: tuple[EngineHash, ...]
    medium: str
    group: int


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The engine dropped its whole prefix cache (a reset)."""


Event = Union[BlockStored, BlockRemoved, AllBlocksCleared]


@dataclass(frozen=True, slots=True)
class EventBatch:
    """One published batch: its events in order; ``unknown`` counts events of unknown types."""

    ts: float
    events: tuple[Event, ...]
    dp_rank: int | None
    unknown: int = 0


def _hash(value: Any, what: str) -> EngineHash:
    if isinstance(value, (int, bytes, str)) and not isinstance(value, bool):
        return value
    raise UndecodablePayload(f"{what}: a block hash must be an int or bytes, got {type(value).__name__}")


def _hashes(value: Any) -> tuple[EngineHash, ...]:
    if not isinstance(value, list) or not value:
        raise UndecodablePayload("block_hashes: expected a non-empty list")
    return tuple(_hash(v, "block_hashes") for v in value)


def _opt_str(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise UndecodablePayload(f"{what}: expected a string or nil, got {type(value).__name__}")


def _medium(value: Any) -> str:
    return _opt_str(value, "medium") or MEDIUM_GPU


def _group(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 16:
        return value
    raise UndecodablePayload(f"group_idx: expected a small int or nil, got {value!r:.40}")


def _tokens(value: Any) -> np.ndarray:
    if not isinstance(value, list):
        raise UndecodablePayload("token_ids: expected a list of ints")
    if not value:
        return np.zeros(0, dtype=np.uint32)
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        raise UndecodablePayload("token_ids: expected a list of ints") from None
    if arr.ndim != 1 or arr.dtype.kind not in "iu":  # floats, strings, nested or mixed lists
        raise UndecodablePayload("token_ids: expected a list of ints")
    if int(arr.min()) < 0 or int(arr.max()) > _MAX_TOKEN:
        raise UndecodablePayload("token_ids: a token id out of range")
    return arr.astype(np.uint32)


def _extra(value: Any, blocks: int) -> tuple[tuple[Any, ...] | None, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != blocks:
        raise UndecodablePayload("extra_keys: expected one entry per block hash")
    out: list[tuple[Any, ...] | None] = []
    for entry in value:
        if entry is not None and not isinstance(entry, list):
            raise UndecodablePayload("extra_keys: an entry must be a list or nil")
        out.append(None if entry is None else tuple(entry))
    return tuple(out)


def _stored(f: Mapping[str, Any]) -> BlockStored:
    hashes = _hashes(f.get("block_hashes"))
    parent = f.get("parent_block_hash")
    size = f.get("block_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise UndecodablePayload(f"block_size: expected a positive int, got {size!r:.40}")
    tokens = _tokens(f.get("token_ids"))
    if tokens.shape[0] != len(hashes) * size:
        raise UndecodablePayload(
            f"token_ids: {tokens.shape[0]} tokens for {len(hashes)} blocks of {size} (expected {len(hashes) * size})"
        )
    return BlockStored(
        block_hashes=hashes,
        parent=None if parent is None else _hash(parent, "parent_block_hash"),
        token_ids=tokens,
        block_size=size,
        medium=_medium(f.get("medium")),
        group=_group(f.get("group_idx")),
        lora_name=_opt_str(f.get("lora_name"), "lora_name"),
        extra_keys=_extra(f.get("extra_keys"), len(hashes)),
    )


def _removed(f: Mapping[str, Any]) -> BlockRemoved:
    return BlockRemoved(_hashes(f.get("block_hashes")), _medium(f.get("medium")), _group(f.get("group_idx")))


def _positional(names: tuple[str, ...], values: list[Any]) -> dict[str, Any]:
    return dict(zip(names, values, strict=False))  # trailing fields may be missing or new


def decode_event(raw: Any) -> Event | None:
    """One event in either encoding; None for an event of an unknown type."""
    if isinstance(raw, dict):
        tag = raw.get("type")
    elif isinstance(raw, list) and raw:
        tag = raw[0]
    else:
        raise UndecodablePayload(f"an event must be a map or a non-empty array, got {type(raw).__name__}")
    if not isinstance(tag, str):
        raise UndecodablePayload("an event's type tag must be a string")
    if tag == "BlockStored":
        return _stored(raw if isinstance(raw, dict) else _positional(_STORED_FIELDS, raw[1:]))
    if tag == "BlockRemoved":
        return _removed(raw if isinstance(raw, dict) else _positional(_REMOVED_FIELDS, raw[1:]))
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    return None


def decode_batch(payload: bytes) -> EventBatch:
    """Decode one published payload (either event encoding).

    Raises:
        UndecodablePayload: not msgpack, or not a batch of well-formed events.
    """
    import msgpack  # type: ignore[import-untyped]

    try:
        raw = msgpack.unpackb(payload, raw=False)
    except Exception as err:  # msgpack raises several types (ExtraData, FormatError, StackError, ...)
        raise UndecodablePayload(f"not msgpack: {type(err).__name__}") from None
    if isinstance(raw, dict):  # a batch encoded as a map (not sent by vLLM; harmless to accept)
        raw = [raw.get("ts"), raw.get("events"), raw.get("data_parallel_rank")]
    if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[1], list):
        raise UndecodablePayload("a batch must be [ts, [event, ...], data_parallel_rank]")
    ts, events = raw[0], raw[1]
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        raise UndecodablePayload("a batch's ts must be a number")
    rank = raw[2] if len(raw) > 2 else None
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)):
        raise UndecodablePayload("data_parallel_rank must be an int or nil")
    out: list[Event] = []
    unknown = 0
    for event in events:
        decoded = decode_event(event)
        if decoded is None:
            unknown += 1
        else:
            out.append(decoded)
    return EventBatch(ts=float(ts), events=tuple(out), dp_rank=rank, unknown=unknown)
