"""Multi-event advance (the fast path's main speed-up): many completions and admissions per
vectorised plan.

Each batch has m *lanes* (slots).  A lane serves requests back to back, and a request's j-th
verification is its batch's (q0 + j)-th, where q0 is its batch's first verification after its
admission.  Given the boundary times, the order of completions (from the pre-sampled step
counts) and of admissions (FCFS, the policy's batch -- for ``rebalance``,
``analysis.batch_rule.join``, the one rule of every path -- arrival <= boundary time) is integer
bookkeeping (``layout``, a short event loop), after which the whole stretch is laid out at once:
context matrices by lane, one cost-model call per phase kind, one cumulative sum for the clock
(``sim.lanes_build``).

With one draft length k for all requests (the usual case) the stretch is laid out in one
causal pass, step by step, with exact times from cost tables (``sim.step_layout``).  With
per-request k (``server.k_choices``) the drafting cost depends on more than a row's size and
context sum, and the layout is found by iteration as follows.

Boundary times depend on the batches, and admissions on the times, so the layout is found as a
fixed point: guess the times, lay out, compute the times, lay out again ...  The system is
causal (admissions at boundary b depend on times up to b, which depend on admissions before b),
so the fixed point is unique and equals the step-by-step result; when the iterations do not
agree everywhere, the plan is cut at the first boundary where the last two layouts differ, up
to which they are provably exact.

The stretch also stops where the step-by-step path would leave the steady PSD overlap (or SD)
regime: a batch running empty, a request needing only its prefill, and for the rebalance
policy an admission into the batch being verified or a move.  Used without a KV limit only.
"""
from __future__ import annotations

import bisect
import heapq
from collections import deque

import numpy as np

from psdlab.analysis.batch_rule import join
from psdlab.sim.lanes_build import Layout, build_plan
from psdlab.sim.step_plan import PhasePlan
from psdlab.sim.step_layout import one_pass_plan, sweepable

MAX_ITERATIONS = 8


def eligible(core) -> bool:
    c = core
    if c.cap > 0 or c.preempted_now:
        return False
    if any(c.traj.nsteps[r] == 0 for r in c.pending):
        return False
    batches = c.bm.batches
    if c.spec.batches == 1:          # lanes lay out serial one-batch steps (draft, then verify)
        return bool(batches[0]) and not c.spec.step.overlapped
    if not batches[0] or not batches[1]:
        return False
    r0, r1 = c.ready[batches[0]], c.ready[batches[1]]
    return bool((r0.all() and not r1.any()) or (r1.all() and not r0.any()))


def _order(core) -> tuple[list[int], int]:
    if core.spec.batches == 2:
        X = 0 if core.ready[core.bm.batches[0]].all() else 1
        return [X, 1 - X], 2
    return [0], 1


def _members(c, order: list[int], period: int):
    """The lanes of the current members: their record columns (batch, lane, request, first
    row, admitted at), the completion heap, the free lanes and the size of each batch."""
    sb, sl, sr, sq, sa = [], [], [], [], []
    heap: list[tuple[int, int, int]] = []
    free: list[list[int]] = []
    size = []
    for bi, B in enumerate(order):
        members = c.bm.batches[B]
        rem = (c.traj.nsteps[members] - c.v[members]).tolist()
        for lane, r in enumerate(members):
            sb.append(bi)
            sl.append(lane)
            sr.append(r)
            sq.append(0)
            sa.append(0)
            heap.append((period * (rem[lane] - 1) + bi + 1, bi, lane))
        free.append(list(range(c.m - 1, len(members) - 1, -1)))
        size.append(len(members))
    heapq.heapify(heap)
    return (sb, sl, sr, sq, sa), heap, free, size


def layout(c, order: list[int], period: int, T: np.ndarray, S_max: int) -> Layout:
    """Admissions and completions for boundary times T (T[b] = start of step b).  Requests
    admitted here are fresh (no KV limit, so no preemption): all their steps are ahead."""
    nsteps, arrival = c.nsteps_list, c.arrival_list
    Tl = T.tolist()
    nb, m = len(order), c.m
    rebalance = nb == 2 and c.bm.policy_name == "rebalance"
    (sb, sl, sr, sq, sa), heap, free, size = _members(c, order, period)
    n_free = sum(len(f) for f in free)
    waiting = deque(c.waiting)
    ptr, N = c.arr_ptr, c.N
    events = []
    S = S_max
    b = 1
    while b < S:
        nxt = heap[0][0] if heap else S
        if n_free:
            if waiting:
                nxt = b
            elif ptr < N:
                a = bisect.bisect_left(Tl, arrival[ptr])
                if a < nxt:
                    nxt = a if a > b else b
        if nxt > b:
            b = nxt
            if b >= S:
                break
        while heap and heap[0][0] == b:
            _, bi, lane = heapq.heappop(heap)
            free[bi].append(lane)
            size[bi] -= 1
            n_free += 1
        Tb = Tl[b]
        while ptr < N and arrival[ptr] <= Tb:
            waiting.append(ptr)
            ptr += 1
        prev = (b - 1) % period
        while waiting:
            # the batch the rule picks (in `order`'s indices; prev is drafted next)
            tgt = join(size, prev, m) if rebalance else prev
            if tgt is None or not free[tgt]:
                break
            r = waiting[0]
            if tgt != prev or nsteps[r] == 0:
                S = b
                break
            waiting.popleft()
            lane = free[tgt].pop()
            n_free -= 1
            q0 = -(-(b - tgt) // period)
            sb.append(tgt)
            sl.append(lane)
            sr.append(r)
            sq.append(q0)
            sa.append(b)
            events.append((b, r))
            size[tgt] += 1
            heapq.heappush(heap, (period * (q0 + nsteps[r] - 1) + tgt + 1, tgt, lane))
        if b >= S:
            break
        if min(size) == 0 or (rebalance and abs(size[0] - size[1]) > 1):
            S = b
            break
        b += 1
    events = [e for e in events if e[0] < S] + [(S, -1)]
    adm = np.asarray(sa, np.int64)
    keep = adm < S
    arr = [np.asarray(x, np.int64)[keep] for x in (sb, sl, sr, sq)]
    return Layout(S, arr[0], arr[1], arr[2], arr[3], adm[keep], events, T)


def _arrival_boundaries(c, T: np.ndarray, lay: Layout) -> np.ndarray:
    """For the future arrivals the layout admitted, and the next one: the first boundary
    b <= S with T[b] >= arrival (S + 1 if none).  Later arrivals queue behind these (FCFS), so
    the layout depends on the times only through these boundaries."""
    admitted = len(lay.events) - 1
    n = max(0, admitted - len(c.waiting)) + 1
    return np.searchsorted(T[:lay.S + 1], c.arrival[c.arr_ptr:c.arr_ptr + n], side="left")


def _boundaries(c, p: PhasePlan, S_max: int) -> np.ndarray:
    """T[b] for b = 0..S_max: the plan's exact step ends, then extrapolated."""
    T = np.empty(S_max + 1)
    T[0] = c.now
    assert p.ends is not None, "the plan is not timed yet"
    T[1:p.S + 1] = p.ends[:, -1]
    if p.S < S_max:
        step = (T[p.S] - T[0]) / p.S
        T[p.S + 1:] = T[p.S] + step * np.arange(1, S_max - p.S + 1)
    return T


def _first_difference(a: Layout, b: Layout) -> int | None:
    for ea, eb in zip(a.events, b.events):
        if ea != eb:
            return min(ea[0], eb[0])
    return None


def _guess(c, S_try: int) -> np.ndarray:
    """Boundary times to start from: what the last plan computed beyond its cut (exact for
    its own layout), else the last mean step length extrapolated."""
    T = c.now + c.last_step * np.arange(S_try + 1)
    g = c.lane_guess
    if g is not None and g.size > 1 and g[0] == c.now:
        n = min(g.size, S_try + 1)
        T[:n] = g[:n]
        if n < S_try + 1:
            T[n:] = g[n - 1] + c.last_step * np.arange(1, S_try + 2 - n)
    c.lane_guess = None
    return T


def plan_lanes(core, S_max: int) -> PhasePlan:
    """The next lanes plan (see the module docstring); its length adapts
    (``core.lane_steps``): doubled after a plan that was exact over its whole length, cut to
    twice the exact prefix otherwise."""
    c = core
    order, period = _order(c)
    if sweepable(c):
        return one_pass_plan(c, order, period, S_max)
    S_try = max(2, min(S_max, c.lane_steps))
    T = _guess(c, S_try)
    d = S_try
    for _ in range(MAX_ITERATIONS):
        lay = layout(c, order, period, T, S_try)
        p = build_plan(c, order, period, lay)
        exact = _boundaries(c, p, S_try)
        ab_est, ab_ex = _arrival_boundaries(c, T, lay), _arrival_boundaries(c, exact, lay)
        differ = ab_est != ab_ex
        if not differ.any():   # same arrival boundaries, hence the same layout: exact
            c.lane_steps = min(S_max, 2 * S_try)
            return p
        # decisions before d agree under both times, so the layout is exact before d
        d = int(np.minimum(ab_est, ab_ex)[differ].min())
        T = exact
    c.lane_steps = max(8, 2 * d)
    if d < p.S:
        c._truncate(p, d)
        c.lane_guess = T[d:]
    return p
