"""Step planning: the servers' step structure, vectorised over the steps of an interval.

A *plan* covers S steps during which no batch changes membership (S = 1 for irregular steps).
Each step is a sequence of *segments*; a segment runs phases in parallel on their devices and
lasts as long as its longest phase:

========================  =======================================================
AR                        [prefill_t] [verify]
SD co-located             [prefill_t] [prefill_d] [draft] [verify]   (one device)
SD on a separate device   [prefill_t | prefill_d] [draft] [verify]
PSD overlapped            [prefill_t | prefill_d] [verify X | draft Y]
PSD start-up              [prefill_t | prefill_d] [draft Y]          (first batch alone)
PSD verify alone          [prefill_t | prefill_d] [verify X]         (other batch empty)
PSD fallback to SD        as SD on a separate device                 (other batch empty)
decoupled drafting (dsd)  [prefill_t | prefill_d] [draft: catch-up] [verify | predraft]
========================  =======================================================

Decoupled drafting (``decoupled``, docs/dsd.md): while the target verifies a round, the drafter
pre-drafts the next one for ``server.dsd_fanout`` = F outcomes per request (an F-way batch of
drafting passes: F times the sequences and contexts of the next round's drafting).  A row whose
outcome was among them (a *hit*, pre-drawn per request and verification: ``Core.hits``) goes
straight to its next verification; the others (and rows new to the batch) are drafted first,
in the catch-up segment, as SD on a separate device drafts them.

The segments are data: each mode's ``StepSegments`` in the registry (``analysis.modes``:
``ModeSpec.step`` for a one-batch step, ``overlapped_step`` for a two-batch one); the regimes
below read them (which segment each phase runs in, the phases' order, the segment count) and
never a mode's name.

Prefill (of requests admitted at the plan's first boundary) happens only in its first step;
later steps have zero-length prefill segments.  Times are accumulated as one running sum over
all segments, which is exactly what the SimPy processes do (``now + d`` per segment), so the
fast path and the SimPy path give bit-identical clocks.

Costs (``sim.costs`` contract): verify = target.forward_time(n, sum_i (k_i + 1), ctx); drafting
= sum over passes j < max k_i of drafter.forward_time(n_j, n_j, ctx_j + j n_j) over the n_j
sequences with k_i > j (for one k: k passes over all n, contexts ctx + j n), plus the
drafter's ``phase_overhead`` once per drafting phase, then the engine step's host work
(``sim.costs.engine_step``, when the config names one) on verify and drafting phases;
prefill = forward_time(n, tokens, 0), with n the prompts' passes (their number, for a model
without a chunking rule: ``prefill_time``).  k_i is per request (``server.k_choices``) or the
same for all.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from psdlab.analysis.modes import StepSegments
from psdlab.sim.kv import blocks


@dataclass
class PhaseArr:
    kind: str
    device: str
    seg: int
    dur: np.ndarray        # [S] seconds
    seqs: np.ndarray       # [S]
    tokens: np.ndarray     # [S]
    ctx: np.ndarray        # [S]
    #: computed in the same target pass as the segment's verify phase (scheduler "v1": a
    #: prefill chunk mixed into the decode step; ``sim.token_budget``): shown in the step's
    #: records with that pass's times, but it holds no device of its own
    rides: bool = False


@dataclass
class VerifySet:
    batch: int | None
    ids: np.ndarray        # request ids
    flat: np.ndarray       # flat trajectory index of their next verification


@dataclass
class SetWork:
    """A fixed set of sequences: size, context per row, verify / draft tokens per step, and
    per drafter pass j the sequences (k_i > j) and their contexts (+ j each) per row."""
    n: int
    C: np.ndarray        # [Q]
    vtok: np.ndarray     # [Q] tokens the verification computes
    dtok: np.ndarray     # [Q] draft tokens proposed
    npass: np.ndarray    # [K, Q]
    cpass: np.ndarray    # [K, Q]


@dataclass
class PhasePlan:
    """A timed stretch of steps as phase arrays (the concrete `sim.server_protocol.StepPlan`)."""
    kind: str              # overlap | sd | startup | verify | prefill
    S: int
    nseg: int
    phases: list[PhaseArr]
    vsets: list[VerifySet]
    vset_of_step: np.ndarray   # [S] index into vsets (-1: no verification)
    q_of_step: np.ndarray      # [S] verifications of that set already done in the plan
    verify_batch: np.ndarray | None = None   # [S] PSD batch ids (-1 none)
    draft_batch: np.ndarray | None = None
    overlapped: bool = False
    prefill_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    starts: np.ndarray | None = None   # [S, nseg] segment start times
    ends: np.ndarray | None = None     # [S, nseg] segment end times
    rows: Any = None       # optional j -> (ids, flat) of the verified rows (lanes plans)
    lanes: Any = None      # lanes plans: their layout (sim.lanes)
    detail: bool = True    # False: only what commit needs (no step records; sim.step_layout)
    chunks: Any = None     # scheduler "v1": the step's prefill chunks (sim.token_budget)

    def step_end(self, j: int) -> float:
        assert self.ends is not None, "the plan is not timed yet"
        return float(self.ends[j, -1])

    @property
    def end(self) -> float:
        """The clock after the plan's last step (``sim.server_protocol.StepPlan``)."""
        return self.step_end(self.S - 1)

    def segment_phases(self) -> list[list[tuple[str, float]]]:
        """The first step's phases that do work, as (device, seconds), per segment."""
        return [[(ph.device, float(ph.dur[0])) for ph in self.phases
                 if ph.seg == seg and ph.seqs[0] > 0 and not ph.rides]
                for seg in range(self.nseg)]


def proposal_caps(core, ids: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """Draft tokens each sequence proposes under ``server.cap_proposals``: min(k_i, R - 1),
    R = output tokens it still needs, from its KV context ``ctx`` (prompt + tokens so far;
    any shape ending in len(ids))."""
    made = ctx - core.prompt[ids]
    return np.clip(np.minimum(core.karr[ids], core.output[ids] - made - 1), 0, None)


def cost_time(model, seqs, tokens, ctx) -> np.ndarray:
    """``model.forward_time`` on arrays of one shape (always the array path, so a step's time
    is the same float whichever way steps are grouped).  The planner's counts are valid by
    construction (non-negative integers), so the cost model's ``time_unchecked`` is called when
    the model has it, skipping the per-call input validation that dominates the cost of small
    calls."""
    s = np.asarray(seqs, dtype=float)
    t = np.asarray(tokens, dtype=float)
    c = np.asarray(ctx, dtype=float)
    formula = getattr(model, "time_unchecked", None)
    if formula is None:
        return np.asarray(model.forward_time(s, t, c), dtype=float)
    return np.asarray(formula(s, t, c), dtype=float)


def prefill_time(model, passes, tokens) -> np.ndarray:
    """A prefill of prompts, ``tokens`` tokens in all, that the engine feeds in ``passes``
    passes (the sum of ``model.prefill_passes``: one a prompt for a model without a chunking
    rule, so it is charged per sequence; ``sim.costs``)."""
    return cost_time(model, passes, tokens, np.zeros(np.shape(tokens)))


class Planner:
    """Builds plans for one server; holds the cost models and the run's constants."""

    def __init__(self, core):
        self.c = core

    # ------------------------------------------------------------------ costs
    def verify_time(self, n, tokens, ctx):
        """One target pass over ``tokens`` = sum of (k_i + 1) for ``n`` sequences."""
        ctx = np.asarray(ctx)
        n = np.broadcast_to(np.asarray(n), ctx.shape)
        tokens = np.broadcast_to(np.asarray(tokens), ctx.shape)
        gpu = cost_time(self.c.target, n, tokens, ctx)
        host = self.c.step_host                      # the engine step (sim.costs.engine_step)
        return gpu if host is None else host.verify(gpu, n, tokens)

    def draft_time(self, npass, cpass):
        """Sequential drafter passes j = 0..K-1 over the ``npass[j]`` sequences with k_i > j
        (contexts ``cpass[j]``), evaluated in one vectorised call and summed in pass order, so
        a step's time does not depend on how many steps are evaluated together."""
        per = cost_time(self.c.drafter, npass, npass, cpass)
        total = np.where(npass[0] > 0, per[0], 0.0)
        for j in range(1, per.shape[0]):
            total = total + np.where(npass[j] > 0, per[j], 0.0)
        phase = float(getattr(self.c.drafter, "phase_overhead", 0.0))
        if phase:
            total = total + np.where(npass[0] > 0, phase, 0.0)
        host = self.c.step_host                      # the engine step (sim.costs.engine_step)
        if host is None:
            return total
        return host.draft(total, npass[0], npass.sum(axis=0), (npass > 0).sum(axis=0))

    def set_work(self, ids: np.ndarray, M: np.ndarray) -> SetWork:
        """Per context row of M [Q, n] (the sequences ``ids``): what drafting and verifying
        that set costs in tokens and passes."""
        c = self.c
        kk = c.karr[ids]
        n = ids.size
        Q = M.shape[0]
        C = M.sum(axis=1)
        j = np.arange(c.k)[:, None]
        if c.cap_proposals:
            return self._capped_work(ids, M, C)
        if c.uniform_k:
            npass = np.full((c.k, Q), n, np.int64)
            cpass = C[None, :] + j * n
        else:
            sel = kk[None, :] > j                                   # [K, n]
            npass = np.broadcast_to(sel.sum(axis=1)[:, None], (c.k, Q))
            cpass = (M[None, :, :] * sel[:, None, :]).sum(axis=2) + j * npass
        return SetWork(n=n, C=C, vtok=np.full(Q, int((kk + 1).sum()), np.int64),
                       dtok=np.full(Q, int(kk.sum()), np.int64), npass=npass, cpass=cpass)

    def _capped_work(self, ids: np.ndarray, M: np.ndarray, C: np.ndarray) -> SetWork:
        """``server.cap_proposals``: row q of M proposes min(k_i, remaining - 1) per sequence
        (remaining = output tokens still to generate, from its context) and the verification
        computes every row at the longest row's width (the runtime pads them)."""
        c = self.c
        kq = proposal_caps(c, ids, M)                               # [Q, n]
        sel = kq[None, :, :] > np.arange(c.k)[:, None, None]        # [K, Q, n]
        npass = sel.sum(axis=2)
        cpass = (M[None, :, :] * sel).sum(axis=2) + np.arange(c.k)[:, None] * npass
        n = ids.size
        return SetWork(n=n, C=C, vtok=n * (kq.max(axis=1) + 1), dtok=kq.sum(axis=1),
                       npass=npass, cpass=cpass)

    def _lookahead(self, ids: np.ndarray) -> np.ndarray:
        return self.c.karr[ids] + 1

    # ------------------------------------------------------------------ pieces
    def _ctx_rows(self, ids: np.ndarray, Q: int) -> tuple[np.ndarray, np.ndarray]:
        """(flat index of next verification [n], context matrix [Q, n]) for q = 0..Q-1."""
        c = self.c
        f = c.traj.off[ids] + c.v[ids]
        last = c.traj.off[ids] + c.traj.nsteps[ids]
        idx = np.minimum(f[None, :] + np.arange(Q)[:, None], last[None, :])
        return f, c.traj.ctx[idx]

    def _prefill_phases(self, S: int, segs: StepSegments) -> dict[str, PhaseArr]:
        """The prefill of the requests admitted at this boundary, on the target and (when the
        mode has one) the drafter, in their segments of ``segs``, keyed by phase."""
        c = self.c
        ids = np.asarray(c.pending, dtype=np.int64)
        n = ids.size
        if n == 0:
            return {}
        lengths = c.prefill_tokens(ids)
        tokens = int(lengths.sum())
        out = {}
        for kind_dev, model, key in ((c.target_dev, c.target, "prefill_t"),
                                     (c.drafter_dev, c.drafter, "prefill_d")):
            if model is None:
                continue
            dur = np.zeros(S)
            passes = int(model.prefill_passes(lengths).sum())
            dur[0] = float(prefill_time(model, np.array([passes]), np.array([tokens]))[0]
                           * c.jitter_at(key, c.step, 1)[0])
            seqs = np.zeros(S, np.int64)
            seqs[0] = n
            toks = np.zeros(S, np.int64)
            toks[0] = tokens
            out[key] = PhaseArr("prefill", kind_dev, segs.at(key), dur, seqs, toks,
                                np.zeros(S, np.int64))
        return out

    def _kv_cut(self, S: int, per_boundary) -> int:
        """First boundary j in 1..S-1 where the blocks needed exceed the capacity (else S)."""
        c = self.c
        if c.cap <= 0 or S <= 1:
            return S
        need = per_boundary(np.arange(1, S))
        over = np.flatnonzero(need > c.cap)
        return int(over[0]) + 1 if over.size else S

    # ------------------------------------------------------------------ regimes
    def sd(self, batch: int | None, ids: np.ndarray, S_max: int) -> PhasePlan:
        """Draft (unless AR) then verify the whole batch, every step."""
        c = self.c
        rem = c.traj.nsteps[ids] - c.v[ids]
        S = int(min(S_max, rem.min()))
        f, M = self._ctx_rows(ids, S + 1)
        if c.cap > 0:
            B = blocks(M, self._lookahead(ids)[None, :], c.block_size).sum(axis=1)
            S = self._kv_cut(S, lambda j: B[j])
        w = self.set_work(ids, M[:S])
        segs = c.spec.step
        phases = self._prefill_phases(S, segs)
        nn = np.full(S, w.n, np.int64)
        if segs.has("draft"):
            phases["draft"] = PhaseArr("draft", c.drafter_dev, segs.at("draft"),
                                       self.draft_time(w.npass, w.cpass)
                                       * c.jitter_at("draft", c.step, S),
                                       np.asarray(w.npass[0, :S], np.int64), w.dtok[:S], w.C)
        phases["verify"] = PhaseArr("verify", c.target_dev, segs.at("verify"),
                                    self.verify_time(w.n, w.vtok[:S], w.C)
                                    * c.jitter_at("verify", c.step, S),
                                    nn, w.vtok[:S], w.C)
        vb = None if batch is None else np.full(S, batch)
        return PhasePlan("sd", S, segs.count, segs.ordered(phases), [VerifySet(batch, ids, f)],
                    np.zeros(S, np.int64), np.arange(S), verify_batch=vb, draft_batch=vb)

    def decoupled(self, ids: np.ndarray, S_max: int) -> PhasePlan:
        """Decoupled drafting (the segments of a step with a ``predraft`` phase): catch up the
        rows whose next round was not pre-drafted, then verify the batch while pre-drafting
        the round after it, F ways, for the rows that go on."""
        c = self.c
        rem = c.traj.nsteps[ids] - c.v[ids]
        S = int(min(S_max, rem.min()))
        f, M = self._ctx_rows(ids, S + 1)
        if c.cap > 0:
            B = blocks(M, self._lookahead(ids)[None, :], c.block_size).sum(axis=1)
            S = self._kv_cut(S, lambda j: B[j])
        w = self.set_work(ids, M[:S])
        # the rows drafted before verification s: at s = 0 those not pre-drafted (``ready``),
        # later those whose previous verification (flat index f + s - 1) missed
        missed = np.empty((S, ids.size), bool)
        missed[0] = ~c.ready[ids]
        if S > 1:
            missed[1:] = ~c.hits[f[None, :] + np.arange(S - 1)[:, None]]
        going_on = rem[None, :] > np.arange(1, S + 1)[:, None]       # a next round to draft
        cn, cp, ct = self._masked_draft(ids, M[:S], missed)
        pn, pp, pt = self._masked_draft(ids, M[1:S + 1], going_on)
        fan = c.fanout
        segs = c.spec.step
        phases = self._prefill_phases(S, segs)
        jd = c.jitter_at("draft", c.step, S)
        phases["draft"] = PhaseArr("draft", c.drafter_dev, segs.at("draft"),
                                   np.where(cn[0] > 0, self.draft_time(cn, cp), 0.0) * jd,
                                   np.asarray(cn[0], np.int64), ct, (M[:S] * missed).sum(axis=1))
        phases["verify"] = PhaseArr("verify", c.target_dev, segs.at("verify"),
                                    self.verify_time(w.n, w.vtok[:S], w.C)
                                    * c.jitter_at("verify", c.step, S),
                                    np.full(S, w.n, np.int64), w.vtok[:S], w.C)
        phases["predraft"] = PhaseArr("draft", c.drafter_dev, segs.at("predraft"),
                                      np.where(pn[0] > 0, self.draft_time(fan * pn, fan * pp),
                                               0.0) * jd,
                                      fan * np.asarray(pn[0], np.int64), fan * pt,
                                      fan * (M[1:S + 1] * going_on).sum(axis=1))
        return PhasePlan("sd", S, segs.count, segs.ordered(phases), [VerifySet(None, ids, f)],
                         np.zeros(S, np.int64), np.arange(S), overlapped=True)

    def _masked_draft(self, ids: np.ndarray, M: np.ndarray, mask: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Drafting of the rows ``mask`` [Q, n] selects, per context row of M [Q, n]: the
        sequences of each pass [K, Q], their contexts [K, Q] (+ j per sequence at pass j,
        as ``set_work``) and the draft tokens [Q]."""
        c = self.c
        kq = (proposal_caps(c, ids, M) if c.cap_proposals
              else np.broadcast_to(c.karr[ids][None, :], M.shape))
        kq = np.where(mask, kq, 0)
        j = np.arange(c.k)
        sel = kq[None, :, :] > j[:, None, None]                      # [K, Q, n]
        npass = sel.sum(axis=2)
        cpass = (M[None, :, :] * sel).sum(axis=2) + j[:, None] * npass
        return npass, cpass, kq.sum(axis=1)

    def overlap(self, X: int, idsX: np.ndarray, allX: bool, Y: int, idsY: np.ndarray,
                S_max: int) -> PhasePlan:
        """PSD: verify X (drafted last step) while drafting Y; swap every step."""
        c = self.c
        rX = int((c.traj.nsteps[idsX] - c.v[idsX]).min())
        rY = int((c.traj.nsteps[idsY] - c.v[idsY]).min())
        S = min(S_max if allX else 1, 2 * rX - 1, 2 * rY)
        Q = (S + 1) // 2 + 1
        fX, MX = self._ctx_rows(idsX, Q)
        fY, MY = self._ctx_rows(idsY, Q)
        if c.cap > 0 and S > 1:
            BX = blocks(MX, self._lookahead(idsX)[None, :], c.block_size).sum(axis=1)
            BY = blocks(MY, self._lookahead(idsY)[None, :], c.block_size).sum(axis=1)
            S = self._kv_cut(S, lambda j: BX[(j + 1) // 2] + BY[j // 2])
        wX, wY = self.set_work(idsX, MX), self.set_work(idsY, MY)
        j = np.arange(S)
        even = (j % 2) == 0
        qv, qd = j // 2, np.where(even, j // 2, (j + 1) // 2)
        v_ctx = np.where(even, wX.C[qv], wY.C[qv])
        v_n, v_tok = np.where(even, wX.n, wY.n), np.where(even, wX.vtok[qv], wY.vtok[qv])
        d_ctx = np.where(even, wY.C[qd], wX.C[qd])
        d_tok = np.where(even, wY.dtok[qd], wX.dtok[qd])
        npass = np.where(even[None, :], wY.npass[:, qd], wX.npass[:, qd])
        d_n = npass[0]
        cpass = np.where(even[None, :], wY.cpass[:, qd], wX.cpass[:, qd])
        segs = self._two_batch()
        phases = self._prefill_phases(S, segs)
        phases["verify"] = PhaseArr("verify", c.target_dev, segs.at("verify"),
                                    self.verify_time(v_n, v_tok, v_ctx)
                                    * c.jitter_at("verify", c.step, S), v_n, v_tok, v_ctx)
        phases["draft"] = PhaseArr("draft", c.drafter_dev, segs.at("draft"),
                                   self.draft_time(npass, cpass)
                                   * c.jitter_at("draft", c.step, S), d_n, d_tok, d_ctx)
        return PhasePlan("overlap", S, segs.count, segs.ordered(phases),
                         [VerifySet(X, idsX, fX), VerifySet(Y, idsY, fY)],
                    np.where(even, 0, 1), j // 2, verify_batch=np.where(even, X, Y),
                    draft_batch=np.where(even, Y, X), overlapped=True)

    def startup(self, Y: int, idsY: np.ndarray) -> PhasePlan:
        """PSD: draft one batch alone (nothing is ready to verify)."""
        c = self.c
        _, M = self._ctx_rows(idsY, 1)
        w = self.set_work(idsY, M)
        segs = self._two_batch()
        phases = self._prefill_phases(1, segs)
        phases["draft"] = PhaseArr("draft", c.drafter_dev, segs.at("draft"),
                                   self.draft_time(w.npass, w.cpass)
                                   * c.jitter_at("draft", c.step, 1),
                                   np.asarray(w.npass[0, :1], np.int64), w.dtok[:1], w.C)
        return PhasePlan("startup", 1, segs.count, segs.ordered(phases), [], np.array([-1]),
                         np.array([0]),
                    verify_batch=np.array([-1]), draft_batch=np.array([Y]))

    def verify_alone(self, X: int, idsX: np.ndarray) -> PhasePlan:
        """PSD: verify the drafted batch while the other batch is empty."""
        c = self.c
        f, M = self._ctx_rows(idsX, 1)
        w = self.set_work(idsX, M)
        n = np.array([w.n])
        segs = self._two_batch()
        phases = self._prefill_phases(1, segs)
        phases["verify"] = PhaseArr("verify", c.target_dev, segs.at("verify"),
                                    self.verify_time(n, w.vtok[:1], w.C)
                                    * c.jitter_at("verify", c.step, 1), n, w.vtok[:1], w.C)
        return PhasePlan("verify", 1, segs.count, segs.ordered(phases), [VerifySet(X, idsX, f)],
                         np.array([0]),
                    np.array([0]), verify_batch=np.array([X]), draft_batch=np.array([-1]))

    def prefill_only(self) -> PhasePlan:
        """Only the admissions' prefill (no batch has a sequence to decode)."""
        segs = self.c.spec.step
        phases = self._prefill_phases(1, segs)
        return PhasePlan("prefill", 1, segs.prefill_count, segs.ordered(phases), [],
                         np.array([-1]), np.array([0]))

    def _two_batch(self) -> StepSegments:
        """The segments of a two-batch step (the mode's ``overlapped_step``)."""
        segs = self.c.spec.overlapped_step
        assert segs is not None, "a two-batch plan of a one-batch mode"
        return segs
