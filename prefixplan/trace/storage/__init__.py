"""The trace engine's storage, sized for logs of millions of requests in bounded memory: an open
addressing index of 64-bit keys (``u64index``), arrays spilled to disk (``spill``) or mapped from
unlinked temporary files (``mapped``), and the two-pass filter that keeps singletons out
(``twice``)."""
