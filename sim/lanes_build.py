"""Vectorised construction and commit of a lanes plan (see ``sim.lanes``), and the `Layout`
both the lanes and the one-pass sweep (``sim.step_layout``) lay a plan out with."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from psdlab.analysis.modes import StepSegments
from psdlab.sim.step_plan import PhaseArr, PhasePlan, prefill_time


@dataclass
class Layout:
    S: int
    b: np.ndarray      # segment's batch index in `order`
    l: np.ndarray      # lane  # noqa: E741 (the layout's field name, used by sim.lanes)
    r: np.ndarray      # request
    q: np.ndarray      # first verification index (in the plan) of the request in its batch
    adm: np.ndarray    # admission boundary (0: already a member)
    events: list       # [(boundary, request)] admissions in order, then (S, -1)
    T: np.ndarray      # the boundary times the layout assumed


def _matrices(c, lay, nb: int, period: int, v: np.ndarray | None = None):
    """Per batch: request ids, flat trajectory indices and occupancy, rows q = 0..Q (Q = its
    verifications within the plan; row Q is the one drafted in the last step).  ``v``: the
    layout's requests' verification counts before the plan (default: the core's now)."""
    traj = c.traj
    vall = c.v[lay.r] if v is None else v
    out = []
    for bi in range(nb):
        Q = -(-(lay.S - bi) // period)
        sel = lay.b == bi
        lane, q0, r, vr = lay.l[sel], lay.q[sel], lay.r[sel], vall[sel]
        rem = traj.nsteps[r] - vr
        lens = np.maximum(np.minimum(q0 + rem, Q + 1) - q0, 0)
        rep = np.repeat(np.arange(lane.size), lens)
        within = np.arange(rep.size) - np.repeat(np.cumsum(lens) - lens, lens)
        rows, cols = q0[rep] + within, lane[rep]
        idx = np.zeros((Q + 1, c.m), np.int64)
        ids = np.full((Q + 1, c.m), -1, np.int64)
        idx[rows, cols] = (traj.off[r] + vr)[rep] + within
        ids[rows, cols] = r[rep]
        mask = ids >= 0
        ctxm = np.where(mask, traj.ctx[idx], 0)
        kmat = np.where(mask, c.karr[ids], 0)
        out.append(_row_work(c, ids, idx, mask, ctxm, kmat))
    return out


def _row_work(c, ids, idx, mask, ctxm, kmat) -> dict:
    """Per row: sequences, context, verify/draft tokens, and per drafter pass j the
    sequences with k_i > j and their contexts (the same integers as ``Planner.set_work``)."""
    n = mask.sum(axis=1)
    C = ctxm.sum(axis=1)
    j = np.arange(c.k)[:, None]
    if c.uniform_k:
        npass = np.broadcast_to(n[None, :], (c.k, n.size))
        cpass = C[None, :] + j * n[None, :]
    else:
        sel = kmat[None, :, :] > j[:, :, None]                      # [K, Q, m]
        npass = sel.sum(axis=2)
        cpass = (ctxm[None, :, :] * sel).sum(axis=2) + j * npass
    return {"ids": ids, "idx": idx, "mask": mask, "n": n, "C": C,
            "vtok": (kmat + mask).sum(axis=1), "dtok": kmat.sum(axis=1),
            "npass": npass, "cpass": cpass}


def _prefill(c, lay, S: int, segs: StepSegments) -> dict[str, PhaseArr]:
    """The requests admitted at boundary b are prefilled in step b (pending ones in step 0),
    in their segments of ``segs``, keyed by phase."""
    n = np.zeros(S, np.int64)
    tok = np.zeros(S, np.int64)
    new = lay.adm > 0
    at = lay.adm[new]
    lengths = c.prefill_tokens(lay.r[new])
    np.add.at(n, at, 1)
    np.add.at(tok, at, lengths)
    pend = np.asarray(c.pending, np.int64)
    pend_len = c.prefill_tokens(pend) if pend.size else np.zeros(0, np.int64)
    n[0] += pend.size
    tok[0] += int(pend_len.sum())
    steps = np.flatnonzero(n > 0)
    out = {}
    for dev, model, key in ((c.target_dev, c.target, "prefill_t"),
                            (c.drafter_dev, c.drafter, "prefill_d")):
        if model is None:
            continue
        dur = np.zeros(S)
        if steps.size:
            passes = np.zeros(S, np.int64)
            np.add.at(passes, at, model.prefill_passes(lengths))
            passes[0] += int(model.prefill_passes(pend_len).sum())
            jit = c.jitter_at(key, c.step, S)[steps]
            dur[steps] = prefill_time(model, passes[steps], tok[steps]) * jit
        out[key] = PhaseArr("prefill", dev, segs.at(key), dur, n.copy(), tok.copy(),
                            np.zeros(S, np.int64))
    return out


def build_plan(c, order: list[int], period: int, lay) -> PhasePlan:
    pl, S, nb = c.planner, lay.S, len(order)
    mats = _matrices(c, lay, nb, period)
    j = np.arange(S)
    vb: np.ndarray | None              # PSD batch ids per step (None: one batch)
    db: np.ndarray | None
    if nb == 2:
        even = (j % 2) == 0
        a, b = mats
        qv, qd = j // 2, np.where(even, j // 2, (j + 1) // 2)

        def pick(key, q, first, second):
            return np.where(even, first[key][..., q], second[key][..., q])
        v_ctx, v_n, v_tok = (pick(key, qv, a, b) for key in ("C", "n", "vtok"))
        d_ctx, d_n, d_tok = (pick(key, qd, b, a) for key in ("C", "n", "dtok"))
        npass, cpass = pick("npass", qd, b, a), pick("cpass", qd, b, a)
        vb, db = np.where(even, order[0], order[1]), np.where(even, order[1], order[0])
        segs = c.spec.overlapped_step
    else:
        w = mats[0]
        v_ctx = d_ctx = w["C"][:S]
        v_n = d_n = w["n"][:S]
        v_tok, d_tok = w["vtok"][:S], w["dtok"][:S]
        npass, cpass = w["npass"][:, :S], w["cpass"][:, :S]
        vb = db = None
        segs = c.spec.step
    assert segs is not None                       # a two-batch mode has its overlapped step
    phases = _prefill(c, lay, S, segs)
    if segs.has("draft"):
        phases["draft"] = PhaseArr("draft", c.drafter_dev, segs.at("draft"),
                                   pl.draft_time(npass, cpass) * c.jitter_at("draft", c.step, S),
                                   d_n, d_tok, d_ctx)
    phases["verify"] = PhaseArr("verify", c.target_dev, segs.at("verify"),
                                pl.verify_time(v_n, v_tok, v_ctx)
                                * c.jitter_at("verify", c.step, S), v_n, v_tok, v_ctx)
    # the mode's segments and phase order, as sim.step_plan
    p = PhasePlan("lanes", S, segs.count, segs.ordered(phases), [], np.zeros(S, np.int64),
                  np.zeros(S, np.int64), verify_batch=vb, draft_batch=db,
                  overlapped=segs.overlapped)
    p.lanes = {"order": order, "period": period, "mats": mats, "layout": lay}
    p.rows = lambda jj: _rows(p, jj)
    c._clock(p)
    return p


def attach_rows(c, p: PhasePlan, order: list[int], period: int, lay) -> None:
    """Give a lanes plan its verified rows, computed on first use (only step records need
    them) from a snapshot of the verification counts, so also after ``commit``."""
    p.lanes = {"order": order, "period": period, "mats": None, "layout": lay,
               "core": c, "v": c.v[lay.r].copy()}
    p.rows = lambda jj: _rows(p, jj)


def _rows(p: PhasePlan, j: int):
    period = p.lanes["period"]
    bi = j % period
    if p.lanes["mats"] is None:
        ln = p.lanes
        ln["mats"] = _matrices(ln["core"], ln["layout"], len(ln["order"]), period, ln["v"])
    w = p.lanes["mats"][bi]
    q = (j - bi) // period
    mask = w["mask"][q]
    return w["ids"][q][mask], w["idx"][q][mask]


def commit_lanes(c, p: PhasePlan) -> None:
    """Apply a lanes plan: verification counts, admissions, completions, batches, queue."""
    S, period, order, lay = p.S, p.lanes["period"], p.lanes["order"], p.lanes["layout"]
    assert p.starts is not None and p.ends is not None      # timed by build
    traj = c.traj
    valid = lay.adm < S
    b, r, q0, adm = lay.b[valid], lay.r[valid], lay.q[valid], lay.adm[valid]
    Qv = np.array([-(-(S - bi) // period) for bi in range(len(order))])
    q_end = q0 + (traj.nsteps[r] - c.v[r]) - 1
    nver = np.maximum(np.minimum(q_end, Qv[b] - 1) - q0 + 1, 0)
    pend = np.asarray(c.pending, np.int64)
    if pend.size:
        fresh = pend[np.isnan(c.first_t[pend])]
        c.first_t[fresh] = p.ends[0, -1] if c.first_at_end else p.starts[0, 0] + p.phases[0].dur[0]
    new = np.flatnonzero(adm > 0)
    if new.size:   # admitted inside the plan, in admission order
        new = new[np.argsort(adm[new], kind="stable")]
        rn, bn = r[new], adm[new]
        c.admitted_t[rn] = p.starts[bn, 0]
        c.first_t[rn] = (p.ends[bn, -1] if c.first_at_end
                         else p.starts[bn, 0] + p.phases[0].dur[bn])
        c.admit_seq[rn] = c.admitted + np.arange(rn.size)
        c.admitted += rn.size
        c.last_batch[rn] = np.asarray(order)[b[new]]
        from_wait = min(rn.size, len(c.waiting))
        for _ in range(from_wait):
            c.waiting.popleft()
        c.arr_ptr += rn.size - from_wait
        c.counters["arrivals"] += rn.size - from_wait
    c.v[r] += nver
    done = c.v[r] >= traj.nsteps[r]
    fin_r, fin_step = r[done], period * q_end[done] + b[done]
    c.finish_t[fin_r] = p.ends[fin_step, -1]
    c.finished_steps = _group_by_step(fin_step, fin_r)
    c.counters["completions"] += int(fin_r.size)
    for bi, B in enumerate(order):
        members = r[~done & (b == bi)]
        c.bm.batches[B] = members[np.argsort(c.admit_seq[members], kind="stable")].tolist()
    c.ready[r] = False
    if len(order) == 2:
        assert p.draft_batch is not None and p.verify_batch is not None
        c.ready[c.bm.batches[int(p.draft_batch[S - 1])]] = True
        c.bm.next_draft = int(p.verify_batch[S - 1])


def _group_by_step(steps: np.ndarray, ids: np.ndarray) -> list[tuple[int, list[int]]]:
    """[(step, sorted ids finishing in it)] in step order."""
    o = np.lexsort((ids, steps))
    out: list[tuple[int, list[int]]] = []
    last = None
    for st, r in zip(steps[o].tolist(), ids[o].tolist()):
        if st != last:
            out.append((st, []))
            last = st
        out[-1][1].append(r)
    return out
