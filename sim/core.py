"""The simulator's state machine, shared by the SimPy path and the fast path.

``Core`` holds the requests, the batches, the KV accounting and the clock.  One *boundary*
(``prepare``) does, in order: take in arrivals (arrival <= now), preempt while the KV cache
would overflow, admit waiting requests (FCFS, through the batch manager), rebalance.  Then
``plan(max_steps)`` (``sim.step_plan``) decides the next steps -- up to ``max_steps`` of them as
long as nothing but counters would change: no request finishes before the last one, no KV
overflow at an inner boundary, and no admission could happen at an inner boundary -- and
``commit(plan)`` applies them.  The SimPy path calls ``plan(1)``; the fast path calls
``plan(large)``; since an S-step plan is by construction the same as S one-step plans, both give
identical traces for the same seed.

``token_budget`` > 0 selects vLLM V1's scheduler (``server.scheduler = "v1"``,
``sim.token_budget``): the boundary, the plan's prefill and the KV accounting are then its
own; with 0 (the default, "v0") none of its code runs.
"""
from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from psdlab.analysis.modes import mode_spec
from psdlab.sim.arrival_clock import ArrivalClock
from psdlab.sim import lanes
from psdlab.sim.batch_assignment import BatchAssignment
from psdlab.sim.kv import blocks
from psdlab.sim.step_plan import PhasePlan, Planner, proposal_caps
from psdlab.sim.trajectories import Trajectories

JITTER_KEYS = ("prefill_t", "prefill_d", "draft", "verify")


class JitterStreams:
    """Per phase kind, one multiplicative factor per global step index (drawn in chunks from a
    dedicated generator), so that a step's factors never depend on how steps are grouped."""

    CHUNK = 8192

    def __init__(self, jitter, seed_seq: np.random.SeedSequence):
        self.jitter = jitter
        active = jitter is not None and getattr(jitter, "active", True)
        self.active = bool(active)
        self.rngs = {k: np.random.default_rng(s)
                     for k, s in zip(JITTER_KEYS, seed_seq.spawn(len(JITTER_KEYS)))}
        self.buf = {k: np.zeros(0) for k in JITTER_KEYS}

    def _draw(self, key: str, n: int) -> np.ndarray:
        rng = self.rngs[key]
        if hasattr(self.jitter, "for_key"):        # one Jitter per phase kind (engine step)
            return np.asarray(self.jitter.for_key(key).factors(rng, n), dtype=float)
        if hasattr(self.jitter, "factors"):
            return np.asarray(self.jitter.factors(rng, n), dtype=float)
        return np.asarray(self.jitter.apply(rng, np.ones(n)), dtype=float)

    def at(self, key: str, step: int, n: int) -> np.ndarray:
        if not self.active:
            return np.ones(n)
        buf = self.buf[key]
        while buf.size < step + n:
            buf = np.concatenate([buf, self._draw(key, self.CHUNK)])
        self.buf[key] = buf
        return buf[step:step + n]


class Core(ArrivalClock):
    def __init__(self, *, mode: str, k: np.ndarray, m: int, policy: str, kv_blocks: int,
                 block_size: int, target, drafter, target_dev: str, drafter_dev: str,
                 arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray,
                 traj: Trajectories, jitter: JitterStreams, cap_proposals: bool = False,
                 step_host=None, first_token_at_step_end: bool = False,
                 hits: np.ndarray | None = None, fanout: int = 1, token_budget: int = 0):
        self.mode, self.m = mode, m
        #: the mode's registry entry (``analysis.modes``): batches, drafter, step segments
        self.spec = mode_spec(mode)
        #: the engine step's host terms (sim.costs.engine_step.StepHost), None: none
        self.step_host = step_host
        #: proposals capped at the output budget (``server.cap_proposals``): one step per plan
        self.cap_proposals = bool(cap_proposals)
        #: ``server.first_token = "step"``: a first token is emitted at its step's end
        self.first_at_end = bool(first_token_at_step_end)
        #: draft length per request (0 for AR); k = the largest (passes the drafter may run)
        self.karr = (np.asarray(k, np.int64) if self.spec.drafting
                     else np.zeros(arrival.size, np.int64))
        self.k = int(self.karr.max()) if self.karr.size else 0
        self.uniform_k = bool(self.karr.size == 0 or (self.karr == self.k).all())
        self.cap, self.block_size = kv_blocks, block_size
        self.target, self.drafter = target, (drafter if self.spec.drafting else None)
        self.target_dev, self.drafter_dev = target_dev, drafter_dev
        self.arrival, self.prompt, self.output, self.traj = arrival, prompt, output, traj
        self.jitter = jitter
        n = arrival.size
        self.N = n
        self.v = np.zeros(n, np.int64)
        self.ready = np.zeros(n, bool)
        self.admit_seq = np.full(n, -1, np.int64)
        self.admitted_t = np.full(n, np.nan)
        self.first_t = np.full(n, np.nan)
        self.finish_t = np.full(n, np.nan)
        self.preempts = np.zeros(n, np.int64)
        self.last_batch = np.full(n, -1, np.int64)
        self.bm = BatchAssignment(self.spec.batches, m, policy)
        self.waiting: deque[int] = deque()
        self.arr_ptr = 0
        self.pending: list[int] = []          # admitted at this boundary: prefill next step
        self.preempted_now: list[int] = []
        self.kv_blocked = False
        self.admitted = 0
        self.now = 0.0
        self.step = 0
        self.last_step = 0.0                  # mean step length of the last plan (a guess)
        self.lane_steps = 64                  # sim.lanes: current plan length to try
        self.lane_guess = None                # sim.lanes: boundary times to start from
        self.step_detail = True               # plans carry what step records need
        self.step_costs = None                # sim.step_layout: cost tables, built on first use
        self.shared_costs = None              # ... from these when set (sim.costtable.TableShare)
        self.nsteps_list = traj.nsteps.tolist()
        self.arrival_list = arrival.tolist()
        self.off_list = traj.off.tolist()
        self.prompt_list = prompt.tolist()
        self.finished_steps: list[tuple[int, list[int]]] = []   # last commit: (step, ids)
        self.counters = {"steps": 0, "arrivals": 0, "completions": 0, "preemptions": 0,
                         "intervals": 0, "idle_jumps": 0}
        #: decoupled drafting (a step with a ``predraft`` phase): per flat trajectory index,
        #: whether that verification's outcome was among the ``fanout`` pre-drafted ones
        #: (``ready`` then says whether a row's next round is pre-drafted)
        self.hits = hits if hits is not None else np.zeros(traj.ctx.size, bool)
        self.fanout = int(fanout)
        self.planner = Planner(self)
        #: ``server.scheduler = "v1"``: the token-budget scheduler (None: "v0")
        self.v1 = None
        if token_budget > 0:
            from psdlab.sim.token_budget import TokenBudgetScheduler
            self.v1 = TokenBudgetScheduler(self, token_budget)

    # ------------------------------------------------------------------ helpers
    def jitter_at(self, key: str, step: int, n: int) -> np.ndarray:
        return self.jitter.at(key, step, n)

    def prefill_tokens(self, ids: np.ndarray) -> np.ndarray:
        """Fresh requests prefill their prompt; preempted ones recompute prompt + output so far."""
        ctx = self.traj.ctx[self.traj.off[ids] + self.v[ids]]
        return np.where(np.isnan(self.first_t[ids]), self.prompt[ids], ctx)

    def running_ids(self) -> list[int]:
        return [r for b in self.bm.batches for r in b]

    def kv_used(self) -> int:
        ids = np.asarray(self.running_ids(), dtype=np.int64)
        if ids.size == 0:
            return 0
        ctx = self.traj.ctx[self.traj.off[ids] + self.v[ids]]
        return int(blocks(ctx, self.karr[ids] + 1, self.block_size).sum())

    def mark_admitted(self, r: int) -> None:
        """Record request ``r``'s admission: its first admission time (kept over preemptions)
        and its place in the admission order."""
        if np.isnan(self.admitted_t[r]):
            self.admitted_t[r] = self.now
        self.admit_seq[r] = self.admitted
        self.admitted += 1

    def _req_blocks(self, r: int) -> int:
        return int(blocks(self.traj.ctx[self.traj.off[r] + self.v[r]], self.karr[r] + 1,
                          self.block_size))

    # ------------------------------------------------------------------ boundary
    def prepare(self) -> str:
        """Run one boundary at ``self.now``; returns 'run', 'idle' or 'done'."""
        if self.v1 is not None:
            return self.v1.prepare()
        while self.arr_ptr < self.N and self.arrival[self.arr_ptr] <= self.now:
            self.waiting.append(self.arr_ptr)
            self.arr_ptr += 1
            self.counters["arrivals"] += 1
        if self.cap > 0:
            self._preempt()
        self._admit()
        if self.bm.running() == 0 and not self.pending:
            if self.arr_ptr < self.N and not self.waiting:
                return "idle"
            if not self.waiting:
                return "done"
            raise RuntimeError("simulator stalled: a waiting request cannot be admitted")
        return "run"

    def _preempt(self) -> None:
        used = self.kv_used()
        while used > self.cap and self.bm.running() > 0:
            r, b = self.bm.victim(self.admit_seq)
            used -= self._req_blocks(r)
            self.bm.remove(r, b)
            self.ready[r] = False
            self.preempts[r] += 1
            self.waiting.appendleft(r)
            self.preempted_now.append(r)
            self.counters["preemptions"] += 1

    def _admit(self) -> None:
        self.kv_blocked = False
        used = self.kv_used() if self.cap > 0 else 0
        while self.waiting:
            r = self.waiting[0]
            prefill_only = self.traj.nsteps[r] == 0
            b = self.bm.choose()          # a request needing only its prefill (output
            if b is None:                 # length 1) also waits for a free slot
                break
            need = 0 if prefill_only else self._req_blocks(r)
            if self.cap > 0 and used + need > self.cap:
                self.kv_blocked = True
                break
            used += need
            self.waiting.popleft()
            self.mark_admitted(r)
            self.pending.append(r)
            if not prefill_only:
                self.bm.add(r, b)
                self.last_batch[r] = b
        for r in self.bm.rebalance(self._holds_drafts(), self.admit_seq):
            self.ready[r] = False
            self.last_batch[r] = 1 - self.last_batch[r]

    def _holds_drafts(self) -> np.ndarray:
        """Per request, whether it holds drafts a move would throw away: drafted (``ready``)
        and, with ``server.cap_proposals``, allowed at least one draft token (a request at its
        last token drafts nothing, so moving it costs nothing -- as in the runtime)."""
        holds = self.ready.copy()
        ids = np.asarray(self.running_ids(), dtype=np.int64)
        if self.cap_proposals and ids.size:
            ctx = self.traj.ctx[self.traj.off[ids] + self.v[ids]]
            holds[ids] &= proposal_caps(self, ids, ctx) > 0
        return holds

    def could_admit(self) -> bool:
        """Whether an admission could happen at a later boundary without any completion."""
        if self.v1 is not None:
            return self.v1.free_slots() > 0
        return self.bm.free_slots() > 0 and not self.kv_blocked

    # ------------------------------------------------------------------ planning
    def plan(self, max_steps: int) -> PhasePlan:
        if self.v1 is not None:
            return self.v1.plan(max_steps)
        if self.cap_proposals or any(self.traj.nsteps[r] == 0 for r in self.pending):
            max_steps = 1
        if max_steps > 1 and lanes.eligible(self):
            return lanes.plan_lanes(self, max_steps)
        p = self._choose_plan(max_steps)
        self._clock(p)
        self._cut_for_admission(p)
        return p

    def _choose_plan(self, max_steps: int) -> PhasePlan:
        pl = self.planner
        batches = self.bm.batches
        if self.spec.batches == 1:
            if not batches[0]:
                return pl.prefill_only()
            if self.spec.step.has("predraft"):
                return pl.decoupled(np.asarray(batches[0], np.int64), max_steps)
            return pl.sd(None, np.asarray(batches[0], np.int64), max_steps)
        nonempty = [b for b in (0, 1) if batches[b]]
        if not nonempty:
            return pl.prefill_only()
        ready_b = [b for b in nonempty if self.ready[batches[b]].any()]
        if ready_b:
            X = ready_b[0]
            Y = 1 - X
            ids = np.asarray(batches[X], np.int64)
            rmask = self.ready[ids]
            if not batches[Y]:
                return pl.verify_alone(X, ids[rmask])
            return pl.overlap(X, ids[rmask], bool(rmask.all()), Y,
                              np.asarray(batches[Y], np.int64), max_steps)
        if len(nonempty) == 2:
            s = self.bm.sizes()
            Y = self.bm.next_draft if s[0] == s[1] else int(np.argmax(s))
            return pl.startup(Y, np.asarray(batches[Y], np.int64))
        B = nonempty[0]
        return pl.sd(B, np.asarray(batches[B], np.int64), max_steps)

    def _clock(self, p: PhasePlan) -> None:
        segs = np.zeros((p.S, p.nseg))
        for ph in p.phases:
            np.maximum(segs[:, ph.seg], ph.dur, out=segs[:, ph.seg])
        flat = np.empty(p.S * p.nseg + 1)
        flat[0] = self.now
        flat[1:] = segs.ravel()
        cs = np.cumsum(flat)
        p.starts = cs[:-1].reshape(p.S, p.nseg)
        p.ends = cs[1:].reshape(p.S, p.nseg)

    def _cut_for_admission(self, p: PhasePlan) -> None:
        """Stop at the first inner boundary where a request could be admitted."""
        if p.S <= 1 or not self.could_admit():
            return
        if self.waiting:
            cut = 1
        elif self.arr_ptr < self.N:
            t_next = self.arrival[self.arr_ptr]
            assert p.ends is not None                 # timed before the cut
            bounds = p.ends[:, -1]
            cut = int(np.searchsorted(bounds, t_next, side="left")) + 1
        else:
            return
        if cut < p.S:
            self._truncate(p, cut)

    @staticmethod
    def _truncate(p: PhasePlan, S: int) -> None:
        p.S = S
        for ph in p.phases:
            ph.dur, ph.seqs, ph.tokens, ph.ctx = ph.dur[:S], ph.seqs[:S], ph.tokens[:S], ph.ctx[:S]
        p.vset_of_step, p.q_of_step = p.vset_of_step[:S], p.q_of_step[:S]
        if p.verify_batch is not None:
            assert p.draft_batch is not None          # PSD plans carry both
            p.verify_batch, p.draft_batch = p.verify_batch[:S], p.draft_batch[:S]
        assert p.starts is not None and p.ends is not None
        p.starts, p.ends = p.starts[:S], p.ends[:S]

    # ------------------------------------------------------------------ commit
    def commit(self, p: PhasePlan) -> None:
        if p.kind == "lanes":
            from psdlab.sim.lanes_build import commit_lanes
            commit_lanes(self, p)
            self._advance(p)
            return
        S = p.S
        pending = np.asarray(self.pending, np.int64)
        if pending.size:
            tpf = [ph for ph in p.phases if ph.kind == "prefill"][0]
            assert p.starts is not None
            t_first = (p.step_end(0) if self.first_at_end
                       else float(p.starts[0, tpf.seg] + tpf.dur[0]))
            fresh = pending[np.isnan(self.first_t[pending])]
            self.first_t[fresh] = t_first
        done: list[int] = [int(r) for r in pending if self.traj.nsteps[r] == 0]
        for r in done:
            self.finish_t[r] = self.first_t[r]
        for si, vs in enumerate(p.vsets):
            nver = int((p.vset_of_step == si).sum())
            if nver == 0:
                continue
            self.v[vs.ids] += nver
            fin = vs.ids[self.v[vs.ids] >= self.traj.nsteps[vs.ids]]
            for r in fin.tolist():
                self.finish_t[r] = p.step_end(S - 1)
                self.bm.remove(r, vs.batch or 0)
                self.ready[r] = False
                done.append(r)
        if self.v1 is not None:
            done.extend(self.v1.commit_chunks(p))
        self._update_ready(p)
        self.finished_steps = [(S - 1, sorted(done))] if done else []
        self.counters["completions"] += len(done)
        self._advance(p)

    def _advance(self, p: PhasePlan) -> None:
        self.counters["steps"] += p.S
        self.counters["intervals"] += 1
        self.pending = []
        self.preempted_now = []
        end = p.step_end(p.S - 1)
        self.last_step = (end - self.now) / p.S
        self.now = end
        self.step += p.S
        self.bm.started = True

    def _update_ready(self, p: PhasePlan) -> None:
        bm = self.bm
        if self.spec.step.has("predraft"):       # a row's next round is pre-drafted iff the
            for vs in p.vsets:                   # outcome of its last verification hit
                going = vs.ids[self.v[vs.ids] < self.traj.nsteps[vs.ids]]
                self.ready[going] = self.hits[self.traj.off[going] + self.v[going] - 1]
        if self.spec.batches == 1 or p.verify_batch is None:
            return
        last = p.S - 1
        assert p.draft_batch is not None              # PSD plans carry both
        vb = int(p.verify_batch[last])
        db = int(p.draft_batch[last])
        if vb >= 0:
            self.ready[bm.batches[vb]] = False
        if db >= 0 and db != vb:
            self.ready[bm.batches[db]] = True
        if p.kind == "sd":
            bm.next_draft ^= (p.S & 1)
        elif p.kind == "startup":
            bm.next_draft = 1 - db
        else:
            bm.next_draft = vb

    def describe_state(self) -> dict[str, Any]:
        return {"sizes": self.bm.sizes(), "waiting": len(self.waiting), "now": self.now}
