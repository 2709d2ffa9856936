"""The adaptive server's KV-cache limit (``server.kv_blocks``, ``server.block_size``): the fixed
modes' rule (``sim.kv``, ``sim.core.Core``) over ``sim.adaptive.AdaptiveServer``'s state.

Blocks of a running request: ``ceil((ctx + lookahead) / block_size)``, ``ctx`` the tokens in its
cache at its next verification (prompt + tokens generated so far, the prefill's first token
counted, as ``sim.trajectories`` has it); a request whose prefill completes it (output length
1) needs none, as in ``Core``.  Before each step (``sim.adaptive.AdaptiveServer.prepare``) the
server preempts running requests, the most recently admitted first, until the running ones fit,
and stops admitting (FCFS, the queue's front) when the next request would not fit.  The
adaptive server has no ``server.policy`` (its PSD batches take newcomers into the smaller one),
so the victim is the most recently admitted request whatever its batch, as the paper policy has
it.  A preempted request frees its blocks and its state: its PSD batch, the drafts it held
(counted in ``drafts_dropped``, as when leaving PSD drops drafts) and the drafter's catch-up
debt; it goes back to the front of the queue and, when admitted again, is prefilled anew over
its prompt and the tokens it has generated (recomputation), as a new admission of that many
tokens would be (``sim.adaptive``: on the target, and on the drafter when the step speculates
or that prefill is hidden, else the drafter catches up later); it keeps its output so far.
Preemptions are counted in ``counters["preemptions"]`` and per request (the request records'
``preemptions``; the adaptive step records, ``sim.trace_records``, do not list them).

The lookahead is that of the largest k the policy may pick, ``max(adaptive.k_choices) + 1``
for every running request (1 when ``adaptive.modes`` is only AR), whatever the step about to run
chooses: the check must happen at the boundary, before the admissions it decides on, and the
policy's choice comes after them (it reads the running and waiting counts the admissions
leave), so the step's k is not known yet; a PSD step also verifies drafts made one step earlier
under a k the policy may have changed since.  vLLM does the same: its scheduler reserves
``num_speculative_tokens`` lookahead slots for every running sequence.  ``check_fits`` (a
request that could never fit alone) uses the same lookahead, so a request admitted alone
always fits and the server cannot stall.
"""
from __future__ import annotations

from itertools import islice
from typing import Any

import numpy as np

from psdlab.sim.kv import blocks


def adaptive_lookahead(modes, k_choices) -> int:
    """Tokens written per request in a step at most: the largest k the policy may pick plus
    the bonus token (1 when the policy may only choose AR)."""
    if all(m == "ar" for m in modes):
        return 1
    return max(k_choices, default=0) + 1


class AdaptiveKV:
    """The KV accounting of an adaptive server: ``capacity`` blocks (0: unlimited, nothing is
    checked), ``block_size`` tokens each, ``lookahead`` tokens per running request."""

    def __init__(self, capacity: int, block_size: int, lookahead: int, n: int):
        self.cap, self.block_size, self.lookahead = int(capacity), int(block_size), lookahead
        self.preempts = np.zeros(n, np.int64)     # per request
        self.preempted_now: list[int] = []        # at the boundary just passed (step records)

    def need(self, server: Any, ids) -> np.ndarray:
        """Blocks each of ``ids`` needs for its next step (0 when its prefill completes it)."""
        arr = np.asarray(ids, np.int64)
        ctx = server.prompt[arr] + np.maximum(server.produced[arr], 1)
        return np.where(server.output[arr] <= 1, 0, blocks(ctx, self.lookahead, self.block_size))

    def used(self, server: Any) -> int:
        """Blocks the running requests need."""
        return int(self.need(server, server.running).sum()) if server.running else 0

    def admissible(self, server: Any) -> int:
        """How many requests from the front of the queue to admit now (FCFS): while a slot is
        free (``server.m``) and, with a limit, the next one's blocks fit beside the running
        requests' (it waits otherwise, and so do the ones behind it)."""
        n = min(len(server.waiting), server.m - len(server.running))
        if self.cap <= 0 or n <= 0:
            return max(n, 0)
        need = np.cumsum(self.need(server, list(islice(server.waiting, n))))
        return int(np.searchsorted(need, self.cap - self.used(server), side="right"))

    def preempt(self, server: Any) -> None:
        """Preempt the most recently admitted running requests (``server.running`` is in
        admission order) until the rest fit."""
        self.preempted_now = []
        if self.cap <= 0:
            return
        used = self.used(server)
        while used > self.cap and server.running:
            r = server.running.pop()
            used -= int(self.need(server, [r])[0])
            self._evict(server, r)

    def _evict(self, server: Any, r: int) -> None:
        """Free ``r``'s state and put it back at the front of the queue."""
        held = int(server.held[r])
        if held > 0:                              # its drafts are thrown away
            server.counters["drafts_dropped"] += held
            server.held[r] = 0
        server.batch[r] = -1
        server.lag[r] = 0                         # its re-admission prefills the drafter anew
        server.waiting.appendleft(r)
        self.preempted_now.append(r)
        self.preempts[r] += 1
        server.counters["preemptions"] += 1
