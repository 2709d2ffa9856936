"""Decoupled drafting (dsd; SSD / Saguaro, arXiv 2603.03251): the expected step from the hit rate.

The model (the simulator's ``dsd`` mode, ``sim.step_plan.Planner.decoupled``; docs/dsd.md):

* One batch of m sequences; the drafter runs on a device of its own.
* While the target verifies round T (time V), the drafter pre-drafts round T+1 for F outcomes
  per sequence (the fan-out budget ``fanout``): an F-way batch of drafting passes, time
  t_pre = t(F m) (the drafting time of F m sequences; a memory-bound drafter makes it close
  to t(m), a compute-bound one close to F t(m)).
* A sequence *hits* when its verification outcome (accepted length and bonus token) is among
  its F pre-drafted ones; hits are independent across sequences and rounds, probability h
  each (the per-request hit rate; ``server.dsd_hit_rate``).  How h grows with F is the
  drafter's business (SSD's geometric fan-out, its Theorem 12); ``geometric_hit_rate`` gives
  the accepted-length part of it under i.i.d. acceptance.
* Catch-up, the rule the simulator runs (``rule = "per-request"``): after the verification the
  drafter drafts again only the missed rows, time t(n) for n misses (t(0) = 0), and the next
  verification starts when it is done.  A step (one verification of the batch) lasts

      E[step] = max(V, t_pre) + sum_n Binom(n; m, 1 - h) t(n)

  ``rule = "per-batch"``: any miss re-drafts the whole batch (a drafter that caches per batch):
  E[step] = max(V, t_pre) + (1 - H) t(m), H = h^m the probability that every row hit.
* Steady state: every row goes on to a next round (the first round after an admission is a
  catch-up of its row, the last pre-draft of a finishing row is skipped; both are left out, as
  are jitter and the engine's host work).

Against SD on a separate device (t + V per step, same m, one more device than SD) and PSD
(max(t, V) per step, two batches: 2m requests in flight on the same devices as dsd): h = 0 is
SD-sep's step plus any pre-drafting beyond V; h = 1 is max(V, t_pre), PSD's step at half its
requests in flight when t_pre = t.  Tokens per step m E(k) as SD; TPOT = step / E(k).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Callable, Literal, Sequence

from psdlab.analysis.checks import check_choice, check_int, check_nonnegative, check_range
from psdlab.analysis.theory.batch import BatchModel, ModeResult

__all__ = ["DSD_RULES", "DecoupledStep", "dsd_step", "dsd_mode", "geometric_hit_rate",
           "trace_hits"]

#: the catch-up rules (module docstring)
DSD_RULES = ("per-request", "per-batch")
CatchUp = Callable[[int], float]


@dataclass(frozen=True)
class DecoupledStep:
    """The expected step of decoupled drafting and its parts (seconds): ``overlapped`` =
    max(V, t_pre), ``catch_up`` = the expected drafting after the verification, ``all_hit``
    = the probability that no row needs a catch-up."""
    step: float
    overlapped: float
    catch_up: float
    all_hit: float
    rule: str


def dsd_step(V: float, t_pre: float, catch_up: CatchUp | Sequence[float], m: int, h: float,
             rule: Literal["per-request", "per-batch"] = "per-request") -> DecoupledStep:
    """E[step] (module docstring) from the verification time ``V``, the pre-drafting time
    ``t_pre`` (the F-way batch), the drafting time of n rows ``catch_up(n)`` (a callable or
    the values for n = 0..m), the batch ``m`` and the per-request hit rate ``h``."""
    check_nonnegative("V", V)
    check_nonnegative("t_pre", t_pre)
    m = check_int("m", m, minimum=1)
    h = check_range("h", h, 0.0, 1.0)
    check_choice("rule", rule, DSD_RULES)
    t = (catch_up if callable(catch_up) else (lambda n: float(catch_up[n])))
    over = max(V, t_pre)
    all_hit = h ** m
    if rule == "per-batch":
        expect = (1.0 - all_hit) * t(m)
    else:
        expect = sum(comb(m, n) * (1.0 - h) ** n * h ** (m - n) * t(n)
                     for n in range(1, m + 1))
    return DecoupledStep(step=over + expect, overlapped=over, catch_up=expect,
                         all_hit=all_hit, rule=rule)


def dsd_mode(model: BatchModel, m: int, k: int, h: float, fanout: int = 1,
             rule: Literal["per-request", "per-batch"] = "per-request") -> ModeResult:
    """Decoupled drafting as a ``batch`` operating point: batch m, draft length k, hit rate
    h, t_pre = t(fanout m, k); the drafter on one more device than the target's."""
    m, k = check_int("m", m, minimum=1), check_int("k", k, minimum=1)
    fanout = check_int("fanout", fanout, minimum=1)
    V = float(model.verify_time(m, k))
    st = dsd_step(V, float(model.draft_time(fanout * m, k)),
                  lambda n: float(model.draft_time(n, k)) if n else 0.0, m, h, rule)
    tokens = m * model.acceptance.emitted(k)
    return ModeResult(mode="dsd", m=m, batches=1, devices=model.target_devices + 1, k=k,
                      step_time=st.step, tokens_per_step=tokens, throughput=tokens / st.step,
                      tpot=st.step / (tokens / m))


def geometric_hit_rate(alpha: float, k: int, fanout: int, bonus: float = 1.0) -> float:
    """The hit rate when the drafter pre-drafts the ``fanout`` likeliest accepted lengths of
    k (i.i.d. acceptance ``alpha``: P(j) = alpha^j (1 - alpha) for j < k, alpha^k for j = k)
    and guesses the bonus token right with probability ``bonus``."""
    alpha = check_range("alpha", alpha, 0.0, 1.0)
    k = check_int("k", k, minimum=1)
    fanout = check_int("fanout", fanout, minimum=1)
    bonus = check_range("bonus", bonus, 0.0, 1.0)
    p = [alpha ** j * (1.0 - alpha) for j in range(k)] + [alpha ** k]
    return bonus * sum(sorted(p, reverse=True)[:fanout])


def trace_hits(steps: Sequence[object]) -> tuple[int, int]:
    """(hits, rows) of a dsd trace's steps (``analysis.trace.StepRecord``): a row verified in
    two consecutive steps hit unless the later step drafted it in its catch-up (the draft
    phase that ends by the verification's start; the pre-draft is the one that runs with the
    verification), so a step's hits are its verified rows less its catch-up's sequences, over
    its rows verified the step before.  h is estimated as hits / rows."""
    hits = rows = 0
    before: set[object] = set()
    for s in steps:
        verified = {v.req for v in getattr(s, "verified", ())}
        if not verified:
            continue
        phases = getattr(s, "phases", ())
        vstart = min(p.start for p in phases if p.kind == "verify")
        catch = sum(p.seqs for p in phases if p.kind == "draft" and p.end <= vstart)
        going = len(verified & before)
        rows += going
        hits += len(verified) - catch
        before = verified
    return hits, rows
