"""The exact one-pass layout of a lanes plan (``sim.lanes``), for a uniform draft length k.

``sim.lanes`` finds a stretch's admissions by a fixed-point iteration over guessed boundary
times.  Below saturation every admission moves the later boundaries by about a prefill, so the
iteration fixes about one admission per round and a stretch needs many rounds.  This module
walks the stretch once, step by step, in causal order instead: at boundary s it applies the
completions and admissions (the same integer rules as ``sim.lanes.layout``; the
batch an admission joins is ``analysis.batch_rule.join``), then computes the
exact duration of step s from the rows it verifies and drafts -- their sequences (the batch
sizes) and summed contexts (one array indexed by the verifying step, which each admission
updates with one strided slice add) -- and cost tables (``sim.costtable``: a dict and an
array look-up instead of a cost-model call).  Times are accumulated segment by segment
exactly as the planner's cumulative sum does, so the layout and the clock are those of the
step-by-step path, bit for bit.  The plan's arrays are then assembled from the recorded columns
in a few numpy calls (or, without step records, only the clock and the prefills: a light plan).

Per step the work is a few list, dict and arithmetic operations; per admission one slice add
and a heap push; numpy is called per plan and per admission, never per step.  The step loop
(``_sweep``: costs and clock) makes no call per step: the boundaries' completions and
admissions are a coroutine (``_lanes``) resumed once per boundary, and a prefill's cost
(``_prefill_durations``) is one call per step that has one.
Per-request draft lengths (``server.k_choices``) make the drafting cost depend on more than
(n, C); those runs keep using ``sim.lanes``' iteration.
"""
from __future__ import annotations

import heapq

import numpy as np

from psdlab.analysis.batch_rule import join
from psdlab.analysis.modes import StepSegments
from psdlab.sim.costtable import MASK, NBITS, SHIFT, CostTables
from psdlab.sim.lanes_build import Layout, attach_rows
from psdlab.sim.step_plan import PhaseArr, PhasePlan


def sweepable(c) -> bool:
    return bool(c.uniform_k)


def _tables(c) -> CostTables:
    if c.step_costs is None:
        c.step_costs = CostTables(c, share=c.shared_costs)
    return c.step_costs


def _initial(c, order, period: int, VLEN: int):
    """Context sums by verification step (``V``), lanes and completion heap of the members.

    Row q of batch bi (its q-th verification in the plan) is verified in step period * q + bi
    and, in PSD, drafted in the step before, so one array indexed by the verifying step holds
    both batches' rows: step s verifies V[s] and (PSD) drafts V[s + 1]."""
    traj = c.traj
    V = np.zeros(VLEN, np.int64)
    heap, free, size = [], [], []
    rec: list[tuple[int, int, int, int, int]] = []   # (b, lane, request, q0, admitted at)
    for bi, B in enumerate(order):
        members = c.bm.batches[B]
        ids = np.asarray(members, np.int64)
        rem = traj.nsteps[ids] - c.v[ids]
        f = traj.off[ids] + c.v[ids]
        lens = np.minimum(rem, -(-(VLEN - bi) // period))
        rep = np.repeat(np.arange(ids.size), lens)
        within = np.arange(rep.size) - np.repeat(np.cumsum(lens) - lens, lens)
        V += np.bincount(period * within + bi, weights=traj.ctx[f[rep] + within],
                         minlength=VLEN).astype(np.int64)
        for lane, (r, rm) in enumerate(zip(members, rem.tolist())):
            rec.append((bi, lane, r, 0, 0))
            heap.append((period * (rm - 1) + bi + 1, bi, lane))
        free.append(list(range(c.m - 1, len(members) - 1, -1)))
        size.append(len(members))
    heapq.heapify(heap)
    return V, heap, free, size, rec


def _segments(c, nb: int) -> StepSegments:
    """The segments of the stretch's steps: the mode's two-batch step with two batches, else
    its one-batch step (``analysis.modes``)."""
    segs = c.spec.overlapped_step if nb == 2 else c.spec.step
    assert segs is not None, "two batches in a one-batch mode"
    return segs


def one_pass_plan(c, order: list[int], period: int, S_max: int) -> PhasePlan:
    """The lanes plan of at most ``S_max`` steps from the current boundary, laid out exactly.
    With ``c.step_detail`` False (no step records wanted) only the clock and the prefills
    are kept: the plan then serves ``commit`` but not ``sim.trace_records.step_records``."""
    segs = _segments(c, len(order))
    S, rec, Tl, rows, pf = _sweep(c, order, period, S_max, segs)
    return _finish(c, order, period, segs, S, rec, Tl, rows, pf)


def _jitter(c, S_max: int, has_draft: bool, has_pd: bool):
    """The per-step jitter factors (verify, draft, target prefill, drafter prefill) of the
    next ``S_max`` steps, or None without jitter.  The draft factors are read only when
    has_draft (has_pd): empty otherwise."""
    if not c.jitter.active:
        return None
    at, step = c.jitter_at, c.step
    jv = at("verify", step, S_max).tolist()
    jd: list[float] = at("draft", step, S_max).tolist() if has_draft else []
    jpt = at("prefill_t", step, S_max).tolist()
    jpd: list[float] = at("prefill_d", step, S_max).tolist() if has_pd else []
    return jv, jd, jpt, jpd


def _pending(c, tabs: CostTables) -> tuple[int, int, int, int]:
    """The prefill owed at the first step: prompts, tokens, extra passes target / drafter."""
    if not c.pending:
        return 0, 0, 0, 0
    pend_len = c.prefill_tokens(np.asarray(c.pending, np.int64))
    xt, xd = tabs.extra(pend_len)
    return len(c.pending), int(pend_len.sum()), xt, xd


def _prefill_durations(tabs: CostTables, s: int, n: int, tok: int, x_t: int, x_d: int,
                       has_pd: bool, jit) -> tuple[float, float]:
    """(target, drafter) seconds of step s's prefill of n prompts and tok tokens."""
    if x_t or x_d:
        pt, pd = tabs.chunked_prefill(n, tok, x_t, x_d)
    else:
        key = (n << NBITS) | (tok >> SHIFT)
        ch = tabs.prefill.chunks.get(key) or tabs.prefill.fill(key)
        i = tok & MASK
        pt = ch[0][i]
        pd = ch[1][i] if has_pd else 0.0
    if jit is not None:
        pt = pt * jit[2][s]
        if has_pd:
            pd = pd * jit[3][s]
    return pt, pd


def _sweep(c, order: list[int], period: int, S_max: int, segs: StepSegments):
    """Walk the stretch step by step (module docstring): the steps S it lays out, the lanes'
    records, the clock, the step rows (n_v, C_v, n_d, C_d, t_v, t_d; with c.step_detail) and the
    prefills (step, prompts, tokens, t_dur, d_dur).  The boundaries are ``_lanes``' work."""
    VLEN = S_max + 2
    V, heap, free, size, rec = _initial(c, order, period, VLEN)
    tabs = _tables(c)
    wch, wtab, mask, nbits, sh = tabs.work.chunks, tabs.work, MASK, NBITS, SHIFT
    has_draft, has_pd, detail = tabs.has_draft, c.drafter is not None, c.step_detail
    jit = _jitter(c, S_max, has_draft, has_pd)
    jv, jd = jit[:2] if jit else ([], [])
    # overlapped (two batches): the row drafted in step s is verified in step s + 1 and a
    # step lasts max(verify, draft); else draft then verify.  serial_prefill: the drafter's
    # prefill waits for the target's (one device)
    psd, sd_coloc = segs.overlapped, segs.serial_prefill
    lanes = _lanes(c, order, period, S_max, V, heap, free, size, rec.append, tabs.extra_passes)
    next_done, ready, _, _ = next(lanes)
    T = c.now
    Tl = [T]
    rows: list[tuple[int, int, int, int, float, float]] = []   # n_v, C_v, n_d, C_d, t_v, t_d
    pf: list[tuple[int, int, int, float, float]] = []    # (step, n, tokens, t_dur, d_dur)
    pfq = _pending(c, tabs)     # the prefill step 0 owes: prompts, tokens, extra passes t / d
    pf_n = pfq[0]
    rows_append, T_append, V_item, send = rows.append, Tl.append, V.item, lanes.send
    if psd:    # the row verified in step 0; later, the row drafted in the step before
        n_d, c_d = size[0], V_item(0)
        key = (n_d << nbits) | (c_d >> sh)
        tv_next = (wch.get(key) or wtab.fill(key))[0][c_d & mask]
    S = S_max
    for s in range(S_max):
        if s and (s == next_done or ready <= T):
            next_done, ready, pfq, stop = send((s, T))
            if stop:
                S = s
                break
            pf_n = pfq[0]
        # ---- step s: the rows verified and drafted, their costs, the clock (module docstring)
        if psd:    # the row drafted in step s is the one verified in step s + 1
            n_v, c_v, tv = n_d, c_d, tv_next
            n_d, c_d = size[(s & 1) ^ 1], V_item(s + 1)
            key = (n_d << nbits) | (c_d >> sh)
            ch = wch.get(key) or wtab.fill(key)
            i = c_d & mask
            td, tv_next = ch[1][i], ch[0][i]
        else:
            n_v = n_d = size[0]
            c_v = c_d = V_item(s)
            key = (n_v << nbits) | (c_v >> sh)
            ch = wch.get(key) or wtab.fill(key)
            i = c_v & mask
            tv = ch[0][i]
            td = ch[1][i] if has_draft else 0.0
        if jit:
            tv = tv * jv[s]
            if has_draft:
                td = td * jd[s]
        if detail:
            rows_append((n_v, c_v, n_d, c_d, tv, td))
        if pf_n:
            pt, pd = _prefill_durations(tabs, s, *pfq, has_pd, jit)
            pf.append((s, pf_n, pfq[1], pt, pd))
            pf_n = 0
            T = (T + pt) + pd if sd_coloc else T + (pt if pt >= pd else pd)
        if psd:
            T = T + (tv if tv >= td else td)
        else:
            if has_draft:
                T = T + td
            T = T + tv
        T_append(T)
    lanes.close()
    return S, rec, Tl, rows, pf


def _lanes(c, order: list[int], period: int, S_max: int, V, heap, free, size, rec_append,
           extra_passes):
    """The boundaries of the sweep, a coroutine (one resumption per boundary, none per step):
    sent (s, T) at boundary s (T its time), it applies the completions, then the FCFS
    admissions into the draft batch (the same integer rules as ``sim.lanes.layout``), and
    yields (next_done, ready, prefill, stop): the next completion boundary, the time from which
    a boundary admits (inf without a free lane, -inf with requests waiting), the prefill the
    admissions owe step s (prompts, tokens, extra target / drafter passes) and whether the
    stretch ends at s.  Its first yield (before any boundary) gives the first two."""
    nsteps, arrival, prompt, off, ctx = (c.nsteps_list, c.arrival_list, c.prompt_list,
                                         c.off_list, c.traj.ctx)
    rebalance, m, VLEN = len(order) == 2 and c.bm.policy_name == "rebalance", c.m, S_max + 2
    xt, xd = extra_passes
    wq, wi, nw, ptr, N = list(c.waiting), 0, len(c.waiting), c.arr_ptr, c.N
    n_free, inf = sum(len(f) for f in free), float("inf")
    heappop, heappush = heapq.heappop, heapq.heappush
    next_done = heap[0][0] if heap else S_max
    a_next = arrival[ptr] if ptr < N else inf
    pfq, stop = (0, 0, 0, 0), False
    while True:
        ready = (-inf if wi < nw else a_next) if n_free else inf
        s, T = yield next_done, ready, pfq, stop
        changed = False
        pf_n = pf_tok = pf_xt = pf_xd = 0
        while next_done == s:
            _, bi, lane = heappop(heap)
            free[bi].append(lane)
            size[bi] -= 1
            n_free += 1
            changed = True
            next_done = heap[0][0] if heap else S_max
        prev = (s - 1) % period
        while n_free:
            if wi < nw:
                r = wq[wi]
            elif a_next <= T:
                r = ptr
            else:
                break
            # the batch the rule picks (in `order`'s indices; prev is drafted next)
            tgt = join(size, prev, m) if rebalance else prev
            if tgt is None or not free[tgt]:
                break
            if tgt != prev or nsteps[r] == 0:
                stop = True
                break
            if wi < nw:
                wi += 1
            else:
                ptr += 1
                a_next = arrival[ptr] if ptr < N else inf
            lane = free[tgt].pop()
            n_free -= 1
            q0 = -(-(s - tgt) // period)
            rec_append((tgt, lane, r, q0, s))
            size[tgt] += 1
            changed = True
            ns = nsteps[r]
            a = period * q0 + tgt            # the step verifying its first row
            done_at = a + period * (ns - 1) + 1
            heappush(heap, (done_at, tgt, lane))
            if done_at < next_done:
                next_done = done_at
            L = min(ns, (VLEN - 1 - a) // period + 1)
            f = off[r]
            V[a:a + period * L:period] += ctx[f:f + L]
            pf_n, pf_tok = pf_n + 1, pf_tok + prompt[r]
            if xt is not None:
                pf_xt += xt[r]
            if xd is not None:
                pf_xd += xd[r]
        if changed and (min(size) == 0 or (rebalance and abs(size[0] - size[1]) > 1)):
            stop = True
        pfq = (pf_n, pf_tok, pf_xt, pf_xd)


def _finish(c, order, period, segs: StepSegments, S, rec, Tl, rows, pf) -> PhasePlan:
    """The plan of the first S steps from the sweep's records: the layout, then the light plan
    (without step detail) or the full one."""
    arr = np.array(rec, np.int64).reshape(-1, 5)
    arr = arr[arr[:, 4] < S]
    new = arr[arr[:, 4] > 0]
    events = list(zip(new[:, 4].tolist(), new[:, 2].tolist())) + [(S, -1)]
    lay = Layout(S, arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4], events,
                 np.asarray(Tl[:S + 1]))
    pf = [x for x in pf if x[0] < S]
    if not c.step_detail:
        return _light(c, order, period, lay, pf)
    cols = list(zip(*rows[:S]))
    return _assemble(c, order, period, lay, segs, cols, pf)


def _prefill_columns(S: int, pf):
    pn, ptok = np.zeros(S, np.int64), np.zeros(S, np.int64)
    pt, pd = np.zeros(S), np.zeros(S)
    if pf:
        steps, n, tok, tdur, ddur = (np.asarray(x) for x in zip(*pf))
        pn[steps], ptok[steps], pt[steps], pd[steps] = n, tok, tdur, ddur
    return pn, ptok, pt, pd


def _light(c, order, period, lay, pf) -> PhasePlan:
    """What ``commit`` needs: the target's prefill phase and the step boundaries (one
    segment per step); no step records can be built from it (``PhasePlan.detail`` False)."""
    S = lay.S
    pn, ptok, pt, _ = _prefill_columns(S, pf)
    phases = [PhaseArr("prefill", c.target_dev, 0, pt, pn, ptok, np.zeros(S, np.int64))]
    zeros = np.zeros(S, np.int64)
    vb = db = None
    if len(order) == 2:
        even = (np.arange(S) % 2) == 0
        vb, db = np.where(even, order[0], order[1]), np.where(even, order[1], order[0])
    p = PhasePlan("lanes", S, 1, phases, [], zeros, zeros, verify_batch=vb, draft_batch=db,
             overlapped=len(order) == 2, detail=False)
    p.lanes = {"order": order, "period": period, "mats": None, "layout": lay, "sweep": True}
    p.starts, p.ends = lay.T[:-1].reshape(S, 1), lay.T[1:].reshape(S, 1)
    return p


def _assemble(c, order, period, lay, segs: StepSegments, cols, pf) -> PhasePlan:

    S, k = lay.S, c.k
    v_n, v_c, d_n, d_c = (np.asarray(x, np.int64) for x in cols[:4])
    v_dur, d_dur = np.asarray(cols[4], float), np.asarray(cols[5], float)
    pn, ptok, pt, pd = _prefill_columns(S, pf)
    zeros = np.zeros(S, np.int64)
    phases = {"prefill_t": PhaseArr("prefill", c.target_dev, segs.at("prefill_t"), pt, pn, ptok,
                                    zeros)}
    if c.drafter is not None:
        phases["prefill_d"] = PhaseArr("prefill", c.drafter_dev, segs.at("prefill_d"), pd,
                                       pn.copy(), ptok.copy(), zeros.copy())
    if segs.has("draft"):
        phases["draft"] = PhaseArr("draft", c.drafter_dev, segs.at("draft"), d_dur, d_n,
                                   d_n * k, d_c)
    phases["verify"] = PhaseArr("verify", c.target_dev, segs.at("verify"), v_dur, v_n,
                                v_n * (k + 1), v_c)
    vb = db = None
    if len(order) == 2:
        even = (np.arange(S) % 2) == 0
        vb, db = np.where(even, order[0], order[1]), np.where(even, order[1], order[0])
    p = PhasePlan("lanes", S, segs.count, segs.ordered(phases), [], np.zeros(S, np.int64),
                  np.zeros(S, np.int64), verify_batch=vb, draft_batch=db,
                  overlapped=segs.overlapped)
    attach_rows(c, p, order, period, lay)
    p.lanes["sweep"] = True            # lay.T is the sweep's clock (tests compare it)
    c._clock(p)
    return p
