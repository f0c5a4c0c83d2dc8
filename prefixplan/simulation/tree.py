"""The simulation's view of the compressed block trie (defined in :mod:`prefixplan.trace.nodes`,
below the analysis, which counts shared prefixes on the same nodes)."""

from prefixplan.trace.nodes import NodeTree, build_tree

__all__ = ["NodeTree", "build_tree"]
