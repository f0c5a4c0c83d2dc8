"""One replica's engine as a queue: continuous batching with chunked prefill, on a virtual clock.

:func:`replica_ttft` replays requests (arrival, tokens to prefill, tokens already cached, output
tokens) through the loop a vLLM-style scheduler runs, one *step* (forward pass) at a time:

1. every running request that has its first token decodes one token (1 token of the step's
   budget each);
2. the rest of the budget (``max_num_batched_tokens``) goes to prefill, first come first served:
   the request at the head of the queue continues its prefill, then the next ones start while
   the budget lasts and fewer than ``max_num_seqs`` requests run; a prompt longer than the budget
   left is cut into chunks over several steps (chunked prefill);
3. the step takes the prefill profile's time for the work in it::

       step = a + b * tokens + c * pairs
       tokens = decodes + prefill chunk tokens
       pairs  = sum over decodes (context + 1/2) + sum over chunks  chunk * (context + chunk / 2)

   (``context``: tokens already in the request's KV: its cached prefix, earlier chunks, tokens
   decoded). A request alone in one step therefore takes exactly ``t(new, cached)`` of
   :class:`~prefixplan.savings.prefill.PrefillProfile`, and the chunks of a long prompt add up to
   the same ``b`` and ``c`` terms plus ``a`` once more per extra chunk;
4. a request whose last prompt token was in the step has its first token at the step's end:
   ``TTFT = step end - arrival``; it then decodes ``output - 1`` more tokens, one a step.

Requests that arrive during a step join the queue at its end. Time is a number carried along
(never the machine's clock), so every figure is exact and the same on any machine. Stretches of
steps that only decode are advanced in one go (their times form an arithmetic series).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prefixplan.errors import UsageError


@dataclass(frozen=True, slots=True)
class StepCost:
    """The time of one step: ``a + b * tokens + c * pairs`` seconds (a prefill profile's terms)."""

    a: float
    b: float
    c: float


@dataclass(frozen=True, slots=True)
class Engine:
    """A replica's scheduler limits: tokens a step computes, requests running at once."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024

    def __post_init__(self) -> None:
        if self.max_num_batched_tokens < 1 or self.max_num_seqs < 1:
            raise UsageError("--max-num-batched-tokens and --max-num-seqs must be >= 1")
        if self.max_num_seqs > self.max_num_batched_tokens:
            raise UsageError(
                "--max-num-seqs may not exceed --max-num-batched-tokens (every running request decodes a token a step)",
                hint="as vLLM requires: max_num_batched_tokens >= max_num_seqs",
            )


class _Decoding:
    """Requests past their first token: each decodes one token a step. The ``g``-th decode step of
    the replica gives a request that joined at step ``g0`` with ``ctx0`` tokens of KV the context
    ``ctx0 + g - g0``, so the sum of contexts is ``base + n * g`` and finishing is a heap of the
    step each request ends at."""

    def __init__(self) -> None:
        self.g = 0  # decode steps so far
        self.base = 0.0  # sum of (ctx0 - g0)
        self.ends: list[tuple[int, float]] = []  # (last step, ctx0 - g0)

    def __len__(self) -> int:
        return len(self.ends)

    def context_sum(self) -> float:
        return self.base + len(self.ends) * self.g

    def join(self, ctx: float, steps: int) -> None:
        if steps > 0:
            offset = ctx - self.g
            heapq.heappush(self.ends, (self.g + steps, offset))
            self.base += offset

    def advance(self, k: int) -> None:
        self.g += k
        while self.ends and self.ends[0][0] <= self.g:
            self.base -= heapq.heappop(self.ends)[1]

    def steps_to_next_finish(self) -> int:
        return self.ends[0][0] - self.g


def _decode_run(cost: StepCost, n: int, context_sum: float, k: int) -> float:
    """Seconds of ``k`` decode-only steps of ``n`` requests whose contexts sum to ``context_sum``:
    step ``i`` takes ``u + v*i`` with ``u = a + b*n + c*(context_sum + n/2)``, ``v = c*n``."""
    u = cost.a + cost.b * n + cost.c * (context_sum + 0.5 * n)
    return k * u + cost.c * n * k * (k - 1) / 2.0


def _steps_until(cost: StepCost, n: int, context_sum: float, gap: float, most: int) -> int:
    """The fewest decode-only steps (at most ``most``) whose time reaches ``gap`` seconds."""
    if _decode_run(cost, n, context_sum, most) < gap:
        return most
    u = cost.a + cost.b * n + cost.c * (context_sum + 0.5 * n)
    v = cost.c * n
    if v > 0:
        half = u - v / 2.0
        k = math.ceil((-half + math.sqrt(half * half + 2.0 * v * gap)) / v)
    else:
        k = math.ceil(gap / u) if u > 0 else most
    k = min(max(k, 1), most)
    while k > 1 and _decode_run(cost, n, context_sum, k - 1) >= gap:
        k -= 1
    while k < most and _decode_run(cost, n, context_sum, k) < gap:
        k += 1
    return k


def replica_ttft(
    arrival: Sequence[float] | np.ndarray,
    new: Sequence[int] | np.ndarray,
    cached: Sequence[int] | np.ndarray,
    output: Sequence[int] | np.ndarray,
    cost: StepCost,
    engine: Engine,
) -> np.ndarray:
    """TTFT in seconds of each request on one replica (module docstring). Requests are given in
    arrival order (``arrival`` non-decreasing); ``new`` tokens are prefilled after ``cached`` ones,
    then ``output - 1`` tokens are decoded (``output`` >= 1)."""
    times = [float(t) for t in arrival]
    left = [int(x) for x in new]
    ctx = [float(x) for x in cached]
    outs = [max(1, int(x)) for x in output]
    n_req = len(times)
    ttft = np.zeros(n_req, dtype=np.float64)
    budget_total, seqs = engine.max_num_batched_tokens, engine.max_num_seqs
    waiting: deque[int] = deque()
    started = 0  # the first ``started`` of ``waiting`` have begun their prefill
    dec = _Decoding()
    # The clock counts from ``base``, the arrival that ended the last idle spell, so that TTFTs keep
    # their precision however late the log's times are (epoch seconds, or a rate scaled towards 0).
    base, now = (times[0] if n_req else 0.0), 0.0
    nxt = 0  # next request to arrive
    while nxt < n_req or waiting or len(dec):
        if not waiting and not len(dec) and times[nxt] - base > now:
            base, now = times[nxt], 0.0
        while nxt < n_req and times[nxt] - base <= now:
            waiting.append(nxt)
            nxt += 1
        d = len(dec)
        if d and (not waiting or (started == 0 and d >= seqs)):
            # only decodes can run: jump to the next finish, or to the next arrival the queue can take
            most = dec.steps_to_next_finish()
            gap = times[nxt] - base - now if nxt < n_req else 0.0
            k = most if waiting or nxt >= n_req else _steps_until(cost, d, dec.context_sum(), gap, most)
            now += _decode_run(cost, d, dec.context_sum(), k)
            dec.advance(k)
            continue
        room = budget_total - d
        tokens, pairs = d, dec.context_sum() + 0.5 * d
        chunks: list[tuple[int, int]] = []
        for i, r in enumerate(waiting):
            if room <= 0:
                break
            if i >= started:
                if d + started >= seqs:
                    break
                started += 1
            take = min(left[r], room)
            chunks.append((r, take))
            tokens += take
            pairs += take * (ctx[r] + take / 2.0)
            room -= take
        now += cost.a + cost.b * tokens + cost.c * pairs
        if d:
            dec.advance(1)
        for r, take in chunks:
            left[r] -= take
            ctx[r] += take
            if left[r] == 0:
                waiting.popleft()  # only the last chunk of a step can be partial: done ones lead
                started -= 1
                ttft[r] = now - (times[r] - base)
                dec.join(ctx[r], outs[r] - 1)
    return ttft
