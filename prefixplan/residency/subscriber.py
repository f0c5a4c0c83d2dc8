"""The sockets: one SUB (and one replay DEALER) per replica, served by one background thread.

Endpoint styles follow the publisher (vLLM's ``ZmqEventPublisher``): an engine configured with a
wildcard (``tcp://*:5557``) or an ``ipc://`` / ``inproc://`` endpoint *binds* its PUB socket, and
the subscriber connects to it; an engine configured with a plain ``tcp://HOST:PORT`` *connects*
to that address, and the subscriber must bind it. :func:`source_for_engine` turns an engine's
``--kv-events-config`` endpoints into the subscriber's side. The replay endpoint is always bound
by the engine (a ROUTER): the subscriber's DEALER sends ``(b"", start_seq as 8 bytes big-endian)``
and reads ``(b"", topic, seq, payload)`` per buffered batch (SGLang: ``(b"", seq, payload)``), then
an end marker whose seq is ``0xFFFFFFFFFFFFFFFF``.

Messages go to each replica's :class:`~prefixplan.residency.stream.ReplicaStream`; a message
that is not ``(topic, 8-byte seq, payload)`` is counted as ``malformed``. Nothing a publisher
sends stops the thread: an unexpected error in one message is counted (``errors``) and noted.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prefixplan.residency.index import ResidencyIndex
from prefixplan.residency.stream import END_SEQ, ReplicaStream, StreamConfig

if TYPE_CHECKING:  # pragma: no cover
    import zmq

_BATCH_PER_POLL = 1000


@dataclass(frozen=True)
class EventSource:
    """Where one replica's KV events come from, as the subscriber sees it.

    ``endpoint`` is connected to, or bound when ``bind`` (an engine that connects);
    ``replay_endpoint`` (connected to) is the engine's replay ROUTER, if any; ``model`` is the
    served model name that namespaces the replica's block keys.
    """

    replica: str
    endpoint: str
    bind: bool = False
    replay_endpoint: str | None = None
    topic: str = ""
    model: str | None = None

    def describe(self) -> str:
        side = f"binds {self.endpoint}" if self.bind else f"connects to {self.endpoint}"
        return side + (f", replay {self.replay_endpoint}" if self.replay_endpoint else ", no replay endpoint")


def engine_binds(endpoint: str) -> bool:
    """Whether an engine given this KV events endpoint binds it (vLLM's rule)."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def _reachable(endpoint: str, host: str) -> str:
    return endpoint.replace("[::]", host).replace("*", host)


def source_for_engine(
    replica: str,
    endpoint: str,
    *,
    host: str,
    replay_endpoint: str | None = None,
    topic: str = "",
    model: str | None = None,
) -> EventSource:
    """The subscriber's side of an engine started with ``--kv-events-config`` ``endpoint`` and
    ``replay_endpoint``: connect to a bound one (wildcards replaced by ``host``, the engine's
    address), bind where the engine connects."""
    binds = engine_binds(endpoint)
    return EventSource(
        replica=replica,
        endpoint=_reachable(endpoint, host) if binds else endpoint,
        bind=not binds,
        replay_endpoint=_reachable(replay_endpoint, host) if replay_endpoint else None,
        topic=topic,
        model=model,
    )


class _Link:
    """One replica's sockets and stream (used by the subscriber's thread only)."""

    def __init__(self, source: EventSource, stream: ReplicaStream) -> None:
        self.source = source
        self.stream = stream
        self.sub: zmq.Socket[Any] | None = None
        self.dealer: zmq.Socket[Any] | None = None
        self.resets = 0


class KvEventSubscriber:
    """Follows the sources' KV events into ``index`` on a background thread.

    ``clock`` (seconds) times replay deadlines, reorder windows and probes; ``poll_ms`` bounds how
    long the thread sleeps between looking at them (and how long :meth:`stop` can take).
    """

    def __init__(
        self,
        index: ResidencyIndex,
        sources: Sequence[EventSource],
        *,
        config: StreamConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        poll_ms: int = 50,
    ) -> None:
        names = [s.replica for s in sources]
        if len(set(names)) != len(names):
            raise ValueError("one event source per replica")
        self.index = index
        self.clock = clock
        self.poll_ms = poll_ms
        self._links: list[_Link] = []
        for src in sources:
            index.add_replica(src.replica, source=src.describe(), model=src.model)
            stream = ReplicaStream(src.replica, index, replay=src.replay_endpoint is not None, config=config)
            self._links.append(_Link(src, stream))
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._ctx: zmq.Context[Any] | None = None  # the thread's, while it runs
        self._poller: zmq.Poller | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Open the sockets (binding where a source says so) and start following; raises what
        opening a socket raised (an address in use, a bad endpoint)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="prefixplan-kv-events", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the KV event subscriber did not open its sockets")
        if self._error is not None:
            self._thread.join()
            raise self._error

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> KvEventSubscriber:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        import zmq

        ctx = self._ctx = zmq.Context()
        poller = self._poller = zmq.Poller()
        try:
            try:
                for link in self._links:
                    self._open(link)
            except Exception as err:  # reported by start()
                self._error = err
                return
            finally:
                self._ready.set()
            now = self.clock()
            for link in self._links:
                self._ask(link, link.stream.start(now))
            while not self._stop.is_set():
                ready = dict(poller.poll(self.poll_ms))
                for link in self._links:
                    if link.sub is not None and link.sub in ready:
                        self._drain(link, link.sub, replay=False)
                    if link.dealer is not None and link.dealer in ready:
                        self._drain(link, link.dealer, replay=True)
                    try:
                        self._after(link, link.stream.tick(self.clock()))
                    except Exception as err:  # never stop following the other replicas
                        link.stream.counters.errors += 1
                        self.index.note(link.source.replica, f"error: {type(err).__name__}: {err}")
        finally:
            for link in self._links:
                for sock in (link.sub, link.dealer):
                    if sock is not None:
                        sock.close(linger=0)
            ctx.term()

    def _open(self, link: _Link) -> None:
        import zmq

        assert self._ctx is not None and self._poller is not None
        src = link.source
        sub = self._ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, 0)  # never drop here: the publisher's HWM is the limit
        sub.setsockopt(zmq.SUBSCRIBE, src.topic.encode())
        link.sub = sub
        if src.bind:
            sub.bind(src.endpoint)
        else:
            sub.connect(src.endpoint)
        self._poller.register(sub, zmq.POLLIN)
        if src.replay_endpoint:
            self._open_dealer(link)

    def _open_dealer(self, link: _Link) -> None:
        import zmq

        assert self._ctx is not None and self._poller is not None
        if link.dealer is not None:
            self._poller.unregister(link.dealer)
            link.dealer.close(linger=0)
        dealer = self._ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        assert link.source.replay_endpoint is not None
        dealer.connect(link.source.replay_endpoint)
        self._poller.register(dealer, zmq.POLLIN)
        link.dealer = dealer
        link.resets = link.stream.replay_resets

    def _ask(self, link: _Link, start: int | None) -> None:
        import zmq

        if start is None or link.dealer is None:
            return
        with contextlib.suppress(zmq.Again):  # nothing to send to yet: the stream's deadline retries
            link.dealer.send_multipart([b"", start.to_bytes(8, "big")], flags=zmq.NOBLOCK)

    def _after(self, link: _Link, start: int | None) -> None:
        if link.stream.replay_resets != link.resets and link.source.replay_endpoint:
            self._open_dealer(link)  # late answers to an abandoned request must not be read
        self._ask(link, start)

    def _drain(self, link: _Link, sock: zmq.Socket[Any], *, replay: bool) -> None:
        import zmq

        stream = link.stream
        for _ in range(_BATCH_PER_POLL):
            try:
                frames = sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            now = self.clock()
            try:
                if replay:
                    start = self._replay_message(stream, frames, now)
                else:
                    start = self._live_message(stream, frames, now)
            except Exception as err:  # a bug must not stop the thread: counted and noted
                stream.counters.errors += 1
                self.index.note(stream.replica, f"error handling a message: {type(err).__name__}: {err}")
                start = None
            if start is not None or stream.replay_resets != link.resets:
                self._after(link, start)
                if replay and sock is not link.dealer:
                    return  # the socket was replaced

    @staticmethod
    def _live_message(stream: ReplicaStream, frames: list[bytes], now: float) -> int | None:
        if len(frames) != 3 or len(frames[1]) != 8:
            stream.counters.malformed += 1
            return None
        return stream.on_live(int.from_bytes(frames[1], "big"), frames[2], now)

    @staticmethod
    def _replay_message(stream: ReplicaStream, frames: list[bytes], now: float) -> int | None:
        # vLLM answers (b"", topic, seq, payload); SGLang's publisher leaves the topic out
        if len(frames) not in (3, 4) or frames[0] != b"" or len(frames[-2]) != 8:
            stream.counters.malformed += 1
            return None
        seq = int.from_bytes(frames[-2], "big")
        if seq == END_SEQ:
            return stream.on_replay_end(now)
        stream.on_replay(seq, frames[-1], now)
        return None
