"""Token-level compressed radix tree over rendered prompts.

Every edge label is a slice ``[start, start + length)`` of one growable ``uint32`` arena, so
memory is one array of tokens plus one small Python object per *branch point* (never per
token). Children are found through a dict keyed by the first token of their edge, and an
edge is compared with a query in one vectorised numpy comparison, so inserting an 8k-token
prompt that shares a 6k-token prefix costs a handful of dict look-ups and array compares.

Namespaces (``Request.namespace``: model | LoRA | cache salt) have separate roots and never
share nodes: an engine never reuses KV blocks across them.

Invariants (checked by ``tests/test_radix.py`` against a brute-force oracle):

* The set of paths spelled by the tree (every prefix of every node path) is exactly the set
  of prefixes of the inserted sequences of that namespace.
* Every non-root node is a branch point (>= 2 children) or an end point (>= 1 inserted
  sequence ends exactly there): a match or a sequence that ends inside an edge splits it.
* ``hits`` of a node = number of inserted sequences that have the node's full path as a
  prefix (passing through or ending there). Because splits happen at every divergence and
  every end point, that is also the count for any prefix whose end lies on the node's edge.
* Edge slices are disjoint and together cover the used arena: ``arena_tokens`` equals the
  total number of distinct (namespace, prefix) positions, i.e. the tree's token count.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from prefixplan.core.types import TOKEN_DTYPE, TokenIds, as_token_ids
from prefixplan.errors import UsageError

DEFAULT_TENANT_CAP = 1024
"""Distinct tenants remembered per node; beyond it a node reports "at least" this many."""

_INITIAL_ARENA = 1 << 16


@dataclass(frozen=True, slots=True)
class NodeView:
    """A read-only snapshot of one tree node.

    ``depth_start``/``depth`` are the token offsets where the node's edge starts/ends in its
    path (roots have ``depth == 0`` and ``parent is None``). ``tenants`` is the number of
    distinct tenants seen (a lower bound when ``tenants_capped``). ``ends`` counts the inserted
    sequences equal to the node's path; ``children`` are child node ids in creation order.
    """

    id: int
    namespace: str
    parent: int | None
    depth_start: int
    depth: int
    hits: int
    ends: int
    tenants: int
    tenants_capped: bool
    first_seen: float | None
    last_seen: float | None
    request_index: int
    children: tuple[int, ...]

    @property
    def edge_length(self) -> int:
        """Tokens on the edge from the parent to this node."""
        return self.depth - self.depth_start


class _Node:
    """Mutable node record (one per branch/end point)."""

    __slots__ = (
        "capped",
        "children",
        "depth",
        "ends",
        "first_seen",
        "hits",
        "id",
        "last_seen",
        "length",
        "ns",
        "parent",
        "request_index",
        "start",
        "tenants",
    )

    def __init__(
        self, node_id: int, ns: str, parent: int | None, start: int, length: int, depth: int, request_index: int
    ) -> None:
        self.id = node_id
        self.ns = ns
        self.parent = parent
        self.start = start  # arena offset of the edge label
        self.length = length  # edge length in tokens
        self.depth = depth  # path length at the end of the edge
        self.children: dict[int, int] = {}
        self.hits = 0
        self.ends = 0
        self.tenants: str | set[str] | None = None  # one tenant kept as a plain str
        self.capped = False
        self.first_seen: float | None = None
        self.last_seen: float | None = None
        self.request_index = request_index


class RadixTree:
    """Compressed radix tree of token sequences, one root per namespace.

    Example:
        >>> tree = RadixTree()
        >>> tree.insert([1, 2, 3, 4], "m", request_index=0)
        0
        >>> tree.insert([1, 2, 9], "m", request_index=1)
        2
        >>> tree.match([1, 2, 3, 7], "m")
        3
    """

    def __init__(self, *, tenant_cap: int = DEFAULT_TENANT_CAP, initial_arena: int = _INITIAL_ARENA) -> None:
        """Create an empty tree.

        Args:
            tenant_cap: Distinct tenants remembered per node (>= 1).
            initial_arena: Initial arena capacity in tokens; it doubles when full.
        """
        if tenant_cap < 1:
            raise UsageError(f"tenant_cap must be >= 1, got {tenant_cap}")
        self._tenant_cap = tenant_cap
        self._arena = np.empty(max(1, initial_arena), dtype=TOKEN_DTYPE)
        self._used = 0
        self._nodes: list[_Node] = []
        self._roots: dict[str, int] = {}
        self._n_sequences = 0

    # ------------------------------------------------------------------ figures
    @property
    def n_nodes(self) -> int:
        """Number of nodes, namespace roots included."""
        return len(self._nodes)

    @property
    def n_sequences(self) -> int:
        """Number of sequences inserted (all namespaces, duplicates and empties included)."""
        return self._n_sequences

    @property
    def arena_tokens(self) -> int:
        """Tokens stored in the arena (= distinct prefix positions over all namespaces)."""
        return self._used

    @property
    def arena_bytes(self) -> int:
        """Bytes allocated for the arena (capacity, not just the used part)."""
        return int(self._arena.nbytes)

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Namespaces in first-insert order."""
        return tuple(self._roots)

    def trim(self) -> None:
        """Shrink the arena's capacity to the tokens used (e.g. once all inserts are done)."""
        if self._arena.shape[0] > max(1, self._used):
            self._arena = self._arena[: max(1, self._used)].copy()

    def root(self, namespace: str) -> int | None:
        """Node id of the namespace's root, or None when nothing was inserted there."""
        return self._roots.get(namespace)

    # ------------------------------------------------------------------ building
    def insert(
        self,
        tokens: Any,
        namespace: str,
        *,
        request_index: int,
        tenant: str | None = None,
        time: float | None = None,
    ) -> int:
        """Insert one sequence and update the stats of every node on its path.

        Args:
            tokens: Token ids (a :data:`TokenIds` array or anything numpy can turn into one).
            namespace: Cache namespace; sequences in different namespaces never share nodes.
            request_index: Index of the request (kept as the representative of new nodes).
            tenant: Tenant / user id, if the log has one.
            time: Request time (seconds), if known; nodes keep min/max as first/last seen.

        Returns:
            Longest common prefix length between ``tokens`` and all sequences inserted
            before in this namespace (0 for the first one), found in the same walk.
        """
        toks = as_token_ids(tokens)
        n = int(toks.shape[0])
        root_id = self._roots.get(namespace)
        if root_id is None:
            root_id = self._new_node(namespace, None, 0, 0, 0, request_index).id
            self._roots[namespace] = root_id
        self._n_sequences += 1
        nodes = self._nodes
        node = nodes[root_id]
        self._touch(node, tenant, time)
        pos = 0
        while pos < n:
            first = int(toks[pos])
            child_id = node.children.get(first)
            if child_id is None:
                self._add_leaf(node, toks, pos, request_index, tenant, time)
                return pos
            child = nodes[child_id]
            k = self._common(child.start, child.length, toks, pos)
            if k < child.length:
                child = self._split(child, k)
            self._touch(child, tenant, time)
            node = child
            pos += k
        node.ends += 1
        return n

    def match(self, tokens: Any, namespace: str) -> int:
        """Length of the longest prefix of ``tokens`` present in ``namespace`` (no mutation)."""
        toks = as_token_ids(tokens)
        n = int(toks.shape[0])
        root_id = self._roots.get(namespace)
        if root_id is None:
            return 0
        nodes = self._nodes
        node = nodes[root_id]
        pos = 0
        while pos < n:
            child_id = node.children.get(int(toks[pos]))
            if child_id is None:
                return pos
            child = nodes[child_id]
            k = self._common(child.start, child.length, toks, pos)
            pos += k
            if k < child.length:
                return pos
            node = child
        return pos

    # ------------------------------------------------------------------ reading
    def node(self, node_id: int) -> NodeView:
        """Snapshot of one node."""
        return self._view(self._nodes[node_id])

    def nodes(self) -> Iterator[NodeView]:
        """All nodes, depth-first preorder (a parent before its children), roots included.

        Namespaces come in first-insert order; children in creation order.
        """
        nodes = self._nodes
        for root_id in self._roots.values():
            stack = [root_id]
            while stack:
                node = nodes[stack.pop()]
                yield self._view(node)
                stack.extend(reversed(node.children.values()))

    def path_tokens(self, node_id: int) -> TokenIds:
        """The token ids of a node's full path (a fresh array)."""
        nodes = self._nodes
        parts = []
        node: _Node | None = nodes[node_id]
        while node is not None:
            if node.length:
                parts.append(self._arena[node.start : node.start + node.length])
            node = nodes[node.parent] if node.parent is not None else None
        if not parts:
            return as_token_ids(np.empty(0, dtype=TOKEN_DTYPE))
        parts.reverse()
        return as_token_ids(np.concatenate(parts))

    def tenants_of(self, node_id: int) -> frozenset[str]:
        """Distinct tenants seen at a node (at most ``tenant_cap`` of them)."""
        t = self._nodes[node_id].tenants
        if t is None:
            return frozenset()
        if isinstance(t, str):
            return frozenset((t,))
        return frozenset(t)

    # ------------------------------------------------------------------ internals
    def _view(self, node: _Node) -> NodeView:
        t = node.tenants
        n_tenants = 0 if t is None else 1 if isinstance(t, str) else len(t)
        return NodeView(
            id=node.id,
            namespace=node.ns,
            parent=node.parent,
            depth_start=node.depth - node.length,
            depth=node.depth,
            hits=node.hits,
            ends=node.ends,
            tenants=n_tenants,
            tenants_capped=node.capped,
            first_seen=node.first_seen,
            last_seen=node.last_seen,
            request_index=node.request_index,
            children=tuple(node.children.values()),
        )

    def _new_node(self, ns: str, parent: int | None, start: int, length: int, depth: int, request_index: int) -> _Node:
        node = _Node(len(self._nodes), ns, parent, start, length, depth, request_index)
        self._nodes.append(node)
        return node

    def _append(self, toks: np.ndarray) -> int:
        """Copy ``toks`` to the end of the arena (amortised doubling); return its offset."""
        n = int(toks.shape[0])
        need = self._used + n
        cap = self._arena.shape[0]
        if need > cap:
            grown = np.empty(max(need, 2 * cap), dtype=TOKEN_DTYPE)
            grown[: self._used] = self._arena[: self._used]
            self._arena = grown
        start = self._used
        self._arena[start:need] = toks
        self._used = need
        return start

    def _common(self, start: int, length: int, toks: np.ndarray, pos: int) -> int:
        """Number of leading tokens shared by edge ``[start, start+length)`` and ``toks[pos:]``."""
        m = min(length, int(toks.shape[0]) - pos)
        neq = self._arena[start : start + m] != toks[pos : pos + m]
        k = int(neq.argmax())  # first True; 0 when none (argmax of bool stops early)
        return k if neq[k] else m

    def _add_leaf(
        self, parent: _Node, toks: np.ndarray, pos: int, request_index: int, tenant: str | None, time: float | None
    ) -> None:
        n = int(toks.shape[0])
        start = self._append(toks[pos:])
        leaf = self._new_node(parent.ns, parent.id, start, n - pos, n, request_index)
        parent.children[int(toks[pos])] = leaf.id
        self._touch(leaf, tenant, time)
        leaf.ends = 1

    def _split(self, child: _Node, k: int) -> _Node:
        """Split ``child``'s edge after ``k`` tokens; return the new middle node.

        The middle node inherits the child's stats: before this insert, exactly the sequences
        through the child passed through the split point.
        """
        parent = self._nodes[child.parent]  # type: ignore[index]
        mid = self._new_node(child.ns, parent.id, child.start, k, child.depth - child.length + k, child.request_index)
        mid.hits = child.hits
        t = child.tenants
        mid.tenants = set(t) if isinstance(t, set) else t
        mid.capped = child.capped
        mid.first_seen = child.first_seen
        mid.last_seen = child.last_seen
        parent.children[int(self._arena[child.start])] = mid.id
        child.start += k
        child.length -= k
        child.parent = mid.id
        mid.children[int(self._arena[child.start])] = child.id
        return mid

    def _touch(self, node: _Node, tenant: str | None, time: float | None) -> None:
        node.hits += 1
        if tenant is not None:
            t = node.tenants
            if t is None:
                node.tenants = tenant
            elif isinstance(t, str):
                if t != tenant:
                    node.tenants = {t, tenant} if self._tenant_cap >= 2 else t
                    node.capped = node.capped or self._tenant_cap < 2
            elif tenant not in t:
                if len(t) < self._tenant_cap:
                    t.add(tenant)
                else:
                    node.capped = True
        if time is not None:
            if node.first_seen is None or time < node.first_seen:
                node.first_seen = time
            if node.last_seen is None or time > node.last_seen:
                node.last_seen = time
