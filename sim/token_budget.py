"""vLLM V1's scheduler (``server.scheduler = "v1"``, docs/scheduler.md): a token budget per step.

Every step's target pass computes at most ``server.max_num_batched_tokens`` = B tokens.  The
decode work comes first: the verify tokens of the batch the target runs this step (sum of
k_i + 1 over its sequences; 1 a sequence for AR) -- the step plan itself is the "v0" planner's
(``sim.step_plan``), so which batch verifies, what drafts and when is unchanged.  The budget
left then goes to prefill *chunks*, first come first served: the requests already being
prefilled (in admission order), then new requests from the queue while a slot is free
(``server.m`` sequences a batch, the prefilling ones included).  A chunk is
min(tokens the request still has to prefill, budget left); a prompt longer than that takes
several steps and joins a batch (``sim.batch_assignment``: the batch the policy picks) at the
boundary after its last chunk, whose pass emits its first token.

Cost of a mixed step: one target pass over the decode rows and the chunk rows together,
``target.forward_time(n_v + n_c, tok_v + tok_c, ctx_v + ctx_c)`` (ctx of a chunk: the
request's tokens prefilled before it), the engine step's host work included
(``Planner.verify_time``); the verify jitter factor of the step applies to it.  The chunk is
recorded as a ``prefill`` phase on the target that rides that pass (``PhaseArr.rides``: the
pass's times, no device of its own).  A step without a verification (nothing decoding yet,
or PSD's start-up, which only drafts) runs its chunks as a target pass of their own in the
step's prefill segment, ``forward_time(n_c, tok_c, ctx_c)`` with the prefill jitter.  The
drafter (SD, SD-sep, PSD, DSD) prefills the same chunks in a pass of its own, in its prefill
segment of the step (co-located SD: before drafting, on the same device).

PSD: both batches' verifications and the chunks share the one target budget; the target runs
one batch's verification a step, so a chunk rides the verify pass of whichever half the
target runs that step (B >= m (k + 1) is checked: one half's decode tokens always fit).

KV (``server.kv_blocks`` > 0): a decoding request holds ``sim.kv.blocks(ctx, k + 1)`` as
under "v0"; a request being prefilled holds the blocks of the tokens prefilled so far, and
its last chunk allocates its full need (``Core._req_blocks``: the lookahead slots included),
so a chunk is scheduled only when its new blocks fit.  At a boundary, while the cache is
over capacity, the latest-admitted request being prefilled is preempted first, then the
batch manager's victim (``BatchAssignment.victim``); a preempted request goes back to the
front of the queue and is prefilled again from its first token (recomputation of prompt and
output so far, ``Core.prefill_tokens``).  When nothing decodes and no chunk fits (the cache
is full of partial prefills) the latest-admitted one is preempted until one fits.

Plans: one step at a time whenever a chunk is pending (a request being prefilled, or a
queued request and a free slot); otherwise the "v0" planner's multi-step plans (decode only;
no lanes plans), cut at the first boundary where an arrival could be admitted
(``Core.could_admit``), so the fast path and the SimPy path give the same trace.

Left out: prefix caching, priorities and the "waiting for remote KV" states, speculative
tokens limited by the budget (the budget always holds the decode tokens), the drafter's
prefill riding its drafting pass (it runs in a pass of its own).
"""
from __future__ import annotations

from collections import deque

import numpy as np

from psdlab.sim.kv import blocks
from psdlab.sim.step_plan import PhaseArr, PhasePlan, cost_time

#: plan kinds laid out in the mode's two-batch step (``ModeSpec.overlapped_step``)
_TWO_BATCH_KINDS = ("overlap", "startup", "verify")


class TokenBudgetScheduler:
    """The "v1" boundary, chunk scheduling and KV accounting of a ``sim.core.Core``."""

    def __init__(self, core, budget: int):
        self.c = core
        self.budget = int(budget)
        n = core.N
        #: requests admitted and not yet joined a batch, in admission order
        self.prefilling: deque[int] = deque()
        self.need = np.zeros(n, np.int64)        # tokens to prefill (prompt, or recompute)
        self.done = np.zeros(n, np.int64)        # of which computed so far
        #: the most tokens any step's target pass computed, and the most KV blocks allocated
        #: after a step's scheduling (for tests and the run's counters)
        self.peak_tokens = 0
        self.peak_blocks = 0

    # ------------------------------------------------------------------ state
    def free_slots(self) -> int:
        """Slots for a new request: m a batch, the requests being prefilled included."""
        c = self.c
        return c.m * c.spec.batches - c.bm.running() - len(self.prefilling)

    def _final_blocks(self, r: int) -> int:
        """What request r holds once prefilled: its first step's blocks (lookahead included);
        a request needing only its prefill holds its prompt's blocks."""
        c = self.c
        if c.traj.nsteps[r] == 0:
            return int(blocks(self.need[r], 0, c.block_size))
        return c._req_blocks(r)

    def _alloc(self, r: int, tokens: int) -> int:
        """Blocks request r holds with ``tokens`` of its prefill computed."""
        if tokens >= self.need[r]:
            return self._final_blocks(r)
        return int(blocks(tokens, 0, self.c.block_size))

    def kv_used(self) -> int:
        """Blocks held: the decoding requests' (as "v0") plus the prefilled tokens' blocks."""
        c = self.c
        return c.kv_used() + sum(self._alloc(r, int(self.done[r])) for r in self.prefilling)

    # ------------------------------------------------------------------ boundary
    def prepare(self) -> str:
        """One boundary: arrivals, joins (fully prefilled requests take their batch), preemption,
        rebalancing; 'run', 'idle' or 'done' (``Core.prepare``)."""
        c = self.c
        while c.arr_ptr < c.N and c.arrival[c.arr_ptr] <= c.now:
            c.waiting.append(c.arr_ptr)
            c.arr_ptr += 1
            c.counters["arrivals"] += 1
        self._join()
        if c.cap > 0:
            self._preempt()
        for r in c.bm.rebalance(c._holds_drafts(), c.admit_seq):
            c.ready[r] = False
            c.last_batch[r] = 1 - c.last_batch[r]
        if c.bm.running() == 0 and not self.prefilling:
            if not c.waiting:
                return "idle" if c.arr_ptr < c.N else "done"
        return "run"

    def _join(self) -> None:
        """Requests whose last chunk ran join the batch the policy picks (FCFS); one that finds
        its batch full (PSD ``paper``: the draft batch) waits, holding its slot."""
        c = self.c
        for r in list(self.prefilling):
            if self.done[r] < self.need[r]:
                continue
            b = c.bm.choose()
            if b is None:
                break
            self.prefilling.remove(r)
            c.bm.add(r, b)
            c.last_batch[r] = b
            c.ready[r] = False

    def _preempt(self) -> None:
        c = self.c
        used = self.kv_used()
        while used > c.cap and (self.prefilling or c.bm.running() > 0):
            if self.prefilling:
                r = self._latest_prefilling()
                used -= self._alloc(r, int(self.done[r]))
                self._evict(r)
            else:
                r, b = c.bm.victim(c.admit_seq)
                used -= c._req_blocks(r)
                c.bm.remove(r, b)
                c.ready[r] = False
                self._requeue(r)

    def _latest_prefilling(self) -> int:
        return max(self.prefilling, key=lambda r: int(self.c.admit_seq[r]))

    def _evict(self, r: int) -> None:
        """Preempt a request being prefilled: its chunks are lost (recomputed later)."""
        self.prefilling.remove(r)
        self.done[r] = 0
        self._requeue(r)

    def _requeue(self, r: int) -> None:
        c = self.c
        c.preempts[r] += 1
        c.waiting.appendleft(r)
        c.preempted_now.append(r)
        c.counters["preemptions"] += 1

    # ------------------------------------------------------------------ planning
    def plan(self, max_steps: int) -> PhasePlan:
        """The next plan: the "v0" planner's decode steps, and in a one-step plan the chunks
        the budget left admits, mixed into the target's pass (module docstring)."""
        c = self.c
        if c.cap_proposals or self.prefilling or (c.waiting and self.free_slots() > 0):
            max_steps = 1
        p = c._choose_plan(max_steps)
        decode = self._decode_tokens(p)
        chunk_tokens = 0
        if p.S == 1:
            chunks = self._schedule(self.budget - decode)
            no_decode = c.bm.running() == 0
            while not chunks and no_decode and self.prefilling:
                self._evict(self._latest_prefilling())     # the cache is full of partial
                chunks = self._schedule(self.budget)        # prefills: make room
            if not chunks and no_decode:
                raise RuntimeError("simulator stalled: a waiting request cannot be admitted")
            if chunks:
                self._attach(p, chunks)
                chunk_tokens = sum(t for _, t, _ in chunks)
        else:
            self.peak_blocks = max(self.peak_blocks, c.kv_used() if c.cap > 0 else 0)
        self.peak_tokens = max(self.peak_tokens, decode + chunk_tokens)
        c._clock(p)
        c._cut_for_admission(p)
        return p

    @staticmethod
    def _decode_tokens(p: PhasePlan) -> int:
        """The most verify tokens a step of plan p computes."""
        return max((int(ph.tokens.max()) for ph in p.phases if ph.kind == "verify"), default=0)

    def _schedule(self, left: int) -> list[tuple[int, int, int]]:
        """(request, chunk tokens, tokens before it) of this step's chunks, FCFS within ``left``
        tokens and the KV capacity; admits queued requests into the free slots."""
        c = self.c
        out: list[tuple[int, int, int]] = []
        used = self.kv_used() if c.cap > 0 else 0
        for r in self.prefilling:
            if left <= 0:
                break
            before = int(self.done[r])
            tok = min(int(self.need[r]) - before, left)
            if tok <= 0:
                continue                              # prefilled, waiting for its batch
            extra = self._alloc(r, before + tok) - self._alloc(r, before)
            if c.cap > 0 and used + extra > c.cap:
                self.peak_blocks = max(self.peak_blocks, used)
                return out
            used += extra
            out.append((r, tok, before))
            left -= tok
        while left > 0 and c.waiting and self.free_slots() > 0:
            r = c.waiting[0]
            self.need[r] = int(c.prefill_tokens(np.array([r]))[0])
            self.done[r] = 0
            tok = min(int(self.need[r]), left)
            extra = self._alloc(r, tok)
            if c.cap > 0 and used + extra > c.cap:
                break
            used += extra
            c.waiting.popleft()
            c.mark_admitted(r)
            self.prefilling.append(r)
            out.append((r, tok, 0))
            left -= tok
        self.peak_blocks = max(self.peak_blocks, used)
        return out

    def _attach(self, p: PhasePlan, chunks: list[tuple[int, int, int]]) -> None:
        """Add the chunks' phases to the one-step plan p: riding its verify pass, or a target
        pass of their own; and the drafter's pass over the same chunks."""
        c = self.c
        segs = c.spec.overlapped_step if p.kind in _TWO_BATCH_KINDS else c.spec.step
        assert segs is not None, "a two-batch plan of a one-batch mode"
        n = np.array([len(chunks)], np.int64)
        tok = np.array([sum(t for _, t, _ in chunks)], np.int64)
        ctx = np.array([sum(b for _, _, b in chunks)], np.int64)
        ver = next((ph for ph in p.phases if ph.kind == "verify" and ph.seqs[0] > 0), None)
        new: list[PhaseArr] = []
        if ver is not None:
            ver.dur = (c.planner.verify_time(ver.seqs + n, ver.tokens + tok, ver.ctx + ctx)
                       * c.jitter_at("verify", c.step, 1))
            target = PhaseArr("prefill", c.target_dev, ver.seg, ver.dur, n, tok, ctx,
                              rides=True)
        else:
            target = PhaseArr("prefill", c.target_dev, segs.at("prefill_t"),
                              cost_time(c.target, n, tok, ctx)
                              * c.jitter_at("prefill_t", c.step, 1), n, tok, ctx)
        new.append(target)
        if c.drafter is not None:
            new.append(PhaseArr("prefill", c.drafter_dev, segs.at("prefill_d"),
                                cost_time(c.drafter, n, tok, ctx)
                                * c.jitter_at("prefill_d", c.step, 1), n.copy(), tok.copy(),
                                ctx.copy()))
        nseg = max([p.nseg] + [ph.seg + 1 for ph in new])
        phases: list[PhaseArr] = []
        for seg in range(nseg):                       # the segment's own prefills first, a
            phases.extend(ph for ph in new if ph.seg == seg and not ph.rides)   # riding one
            for ph in p.phases:                                                 # after its
                if ph.seg == seg:                                               # verify
                    phases.append(ph)
                    if ph is ver:
                        phases.append(target)
        p.phases, p.nseg = phases, nseg
        p.chunks = (chunks, target)

    # ------------------------------------------------------------------ commit
    def commit_chunks(self, p: PhasePlan) -> list[int]:
        """Apply plan p's chunks (``Core.commit``): a request's last chunk emits its first
        token at the end of its target pass (or of the step, ``server.first_token = "step"``);
        returns the requests that finish with it (output length 1)."""
        if p.chunks is None:
            return []
        c = self.c
        chunks, target = p.chunks
        assert p.starts is not None
        t_first = (p.step_end(0) if c.first_at_end
                   else float(p.starts[0, target.seg] + target.dur[0]))
        done: list[int] = []
        for r, tok, _ in chunks:
            self.done[r] += tok
            if self.done[r] < self.need[r]:
                continue
            if np.isnan(c.first_t[r]):
                c.first_t[r] = t_first
            if c.traj.nsteps[r] == 0:
                c.finish_t[r] = c.first_t[r]
                self.prefilling.remove(r)
                done.append(r)
        return done
