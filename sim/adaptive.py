"""The simulator's adaptive server (``[server] mode = "adaptive"``): AR, SD(k) or PSD(k) chosen
at every step boundary by ``analysis.adaptive_policy`` (settings: the ``[adaptive]`` table).

The server holds up to ``server.m`` sequences (the same slots in every mode; PSD splits them
into two batches, as the runtime's ``max_num_seqs``).  The drafter has a device of its own, so
a step is one of (segments in brackets, phases in a segment run at once):

    AR      [prefill_t]              [verify all]
    SD(k)   [prefill_t | prefill_d]  [catch-up + draft all]  [verify all]
    PSD(k)  [prefill_t | prefill_d]  [verify X | catch-up + draft Y]   (swap every step)
    PSD start-up                     [draft Y]                          (nothing ready yet)

Admissions prefill the drafter too (in parallel, on its device) when the step speculates, as
the runtime does, and also during AR when that prefill is hidden behind the target's (it takes
no longer), as with a small drafter on a GPU of its own.  Switching costs are paid where they
arise and counted: what the drafter did not follow (AR steps, prompts admitted during AR) is
caught up -- a drafter prefill of the tokens it missed -- the first time the sequence is
drafted again (``catch_up``); entering PSD re-forms two batches and drafts one of them alone
(``psd_startup``); leaving PSD drops the drafts of the batch that was ready
(``drafts_dropped``, the drafting time that was spent on them).

Acceptance is drawn when a step is planned, from one generator in request-id order, and the
step's durations come from the cost models (``sim.adaptive_costs``: with the engine step's host
work when ``server.engine_step`` names one) times the step-time jitter of the step's index (the
same streams as the fixed modes, ``sim.core.JitterStreams``), so the SimPy path (devices as
resources, one process per phase) and the fast path, which drive this server and
``sim.core.Core`` through one protocol (``sim.server_protocol``), give identical traces for the
same seed.  ``server.first_token = "step"`` emits a first token at the end of its step.
``server.cap_proposals``: a sequence proposes min(k, tokens it still needs - 1), the
verification padded to the longest row.  A KV limit (``server.kv_blocks``): ``sim.adaptive_kv``
(the fixed modes' blocks, preemption by recomputation and admission check, with the lookahead
of the largest k the policy may pick); a re-admitted request's prefill, on the target and the
drafter, covers its prompt and the tokens it has generated.  Refused with this mode
(``sim.build``, a one-line error): per-request k (``server.k_choices``: the policy picks k).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from psdlab.sim.arrival_clock import ArrivalClock
from psdlab.analysis.adaptive_policy import AcceptanceTracker, AdaptivePolicy, LiveState
from psdlab.analysis.modes import STEP_MODES
from psdlab.analysis.trace import RequestRecord
from psdlab.sim.adaptive_costs import ModelCosts, capped_draft_phase, draft_phase, verify_phase
from psdlab.sim.adaptive_kv import AdaptiveKV
from psdlab.sim.step_plan import cost_time, prefill_time

#: one phase: kind, device, duration (s), sequences, tokens, context tokens
PhaseT = tuple[str, str, float, int, int, int]


@dataclass
class Step:
    """One planned step: its segments of phases, the verifications and drafts it carries and,
    once planned, the clock after each segment (``ends``, from ``start``)."""
    choice: str
    segments: list[list[PhaseT]]
    verified: list[tuple[int, int, int, int]] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)
    drafted_k: list[int] = field(default_factory=list)     # draft tokens of each drafted
    k: int = 0
    verify_batch: int | None = None
    draft_batch: int | None = None
    ready_after: int | None = None
    start: float = 0.0
    ends: list[float] = field(default_factory=list)

    def segment_phases(self) -> list[list[tuple[str, float]]]:
        """(device, seconds) of each phase, per segment (``sim.server_protocol.StepPlan``)."""
        return [[(p[1], p[2]) for p in seg] for seg in self.segments]

    @property
    def end(self) -> float:
        """The clock after the step."""
        return self.ends[-1] if self.ends else self.start


class AdaptiveServer(ArrivalClock):
    """The state machine both paths drive (``sim.server_protocol.Server``): ``prepare`` /
    ``plan`` / ``commit``.  ``jitter``: a ``sim.core.JitterStreams`` (None: none); ``hosts``:
    the engine step per mode ("ar", "sd", "psd": ``StepHost``; None: no engine step); ``kv``:
    the KV limit (``sim.adaptive_kv.AdaptiveKV``; None: none)."""

    def __init__(self, *, m: int, policy: AdaptivePolicy, target, drafter, acceptance,
                 params: np.ndarray, arrival, prompt, output, rng: np.random.Generator,
                 target_dev: str, drafter_dev: str, jitter: Any = None,
                 hosts: dict[str, Any] | None = None, first_token_at_step_end: bool = False,
                 cap_proposals: bool = False, kv: AdaptiveKV | None = None):
        self.m, self.policy = m, policy
        self.tracker = AcceptanceTracker.for_config(policy.cfg)
        self.target, self.drafter, self.acceptance = target, drafter, acceptance
        self.params, self.rng = params, rng
        self.arrival, self.prompt, self.output = arrival, prompt, output
        self.target_dev, self.drafter_dev = target_dev, drafter_dev
        self.jitter, self.hosts = jitter, hosts
        self.first_at_end = bool(first_token_at_step_end)
        self.cap = bool(cap_proposals)            # propose min(k, tokens still needed - 1)
        self.step_detail = True                   # the fast path's switch (unused here)
        n = self.N = arrival.size
        self.produced = np.zeros(n, np.int64)
        self.lag = np.zeros(n, np.int64)
        self.batch = np.full(n, -1, np.int64)
        self.held = np.zeros(n, np.int64)          # drafts held (k of the last draft; 0 none)
        self.admitted_t = np.full(n, np.nan)
        self.kv = kv if kv is not None else AdaptiveKV(0, 1, 1, n)
        self.first_t = np.full(n, np.nan)
        self.finish_t = np.full(n, np.nan)
        self.running: list[int] = []
        self.waiting: deque[int] = deque()
        self.pending: list[int] = []
        self.arr_ptr = 0
        self.now = 0.0
        self.step = 0
        self.mode: tuple[str, int] | None = None
        self.ready: int | None = None             # PSD: the batch whose drafts are ready
        self.last_draft_s = 0.0
        self.timeline: list[tuple[float, str]] = []
        self.counters = {"steps": 0, "arrivals": 0, "completions": 0, "preemptions": 0,
                         "intervals": 0, "idle_jumps": 0, "switches": 0, "steps_ar": 0,
                         "steps_sd": 0, "steps_psd": 0, "catch_up_tokens": 0,
                         "drafts_dropped": 0}
        self.finished: list[int] = []
        self.memo: dict = {}                      # the policy's cost estimates (ModelCosts)

    def _factor(self, key: str) -> float:
        """The jitter factor of phase kind ``key`` at this step (1.0 without jitter)."""
        if self.jitter is None:
            return 1.0
        return float(self.jitter.at(key, self.step, 1)[0])

    def _ks(self, ids: list[int], k: int) -> list[int]:
        """Draft tokens per sequence: k, or min(k, tokens it still needs - 1) with
        ``server.cap_proposals``."""
        if not self.cap:
            return [k] * len(ids)
        arr = np.asarray(ids, np.int64)
        left = self.output[arr] - self.produced[arr] - 1
        return np.clip(np.minimum(k, left), 0, None).tolist()

    def _host(self) -> Any:
        """The engine step of the current mode, or None."""
        if self.hosts is None:
            return None
        return self.hosts[self.mode[0] if self.mode else "ar"]

    # ------------------------------------------------------------------ boundary
    def prepare(self) -> str:
        while self.arr_ptr < self.N and self.arrival[self.arr_ptr] <= self.now:
            self.waiting.append(self.arr_ptr)
            self.arr_ptr += 1
            self.counters["arrivals"] += 1
        self.kv.preempt(self)
        for _ in range(self.kv.admissible(self)):
            r = self.waiting.popleft()
            if np.isnan(self.admitted_t[r]):      # a re-admission keeps its first admission
                self.admitted_t[r] = self.now
            self.running.append(r)                # ``running`` stays in admission order
            self.pending.append(r)
        if self.running:
            return "run"
        if self.waiting:
            raise RuntimeError("simulator stalled: a waiting request cannot be admitted")
        return "idle" if self.arr_ptr < self.N else "done"

    def ctx(self, ids) -> np.ndarray:
        return self.prompt[ids] + self.produced[ids]

    # ------------------------------------------------------------------ deciding
    def _decide(self) -> tuple[str, int]:
        ids = np.asarray(self.running, np.int64)
        mean_ctx = float(self.ctx(ids).mean()) if ids.size else 0.0
        kmax = max(self.policy.cfg.k_choices, default=1)
        state = LiveState(running=len(self.running), waiting=len(self.waiting), slots=self.m,
                          acceptance=self.tracker.rates(kmax),
                          drafter_lag=int(self.lag[ids].sum()) if ids.size else 0)
        d = self.policy.decide(state, ModelCosts(self.target, self.drafter, mean_ctx,
                                                 self.memo,
                                                 self.hosts["sd"] if self.hosts else None))
        new = (d.mode, d.k)
        if new != self.mode:
            if self.mode is not None:
                self.counters["switches"] += 1
                if self.mode[0] == "psd" and new[0] != "psd":
                    self._drop_drafts()
            if new[0] == "psd" and (self.mode is None or self.mode[0] != "psd"):
                self._form_batches()
            self.timeline.append((self.now, d.label))
            self.mode = new
        return new

    def _drop_drafts(self) -> None:
        held = [r for r in self.running if self.held[r] > 0]
        if held:
            self.counters["drafts_dropped"] += int(self.held[held].sum())
            self.policy.note_cost("drafts_dropped", self.last_draft_s)
        self.held[held] = 0
        self.ready = None

    def _form_batches(self) -> None:
        for i, r in enumerate(self.running):
            self.batch[r] = i % 2
        self.held[self.running] = 0
        self.ready = None

    # ------------------------------------------------------------------ planning
    def plan(self, max_steps: int = 1) -> Step:
        """The next step (one; ``max_steps`` is the protocol's), timed from ``now``."""
        step = self._plan()
        step.start = self.now
        step.ends = segment_ends(self.now, step)
        return step

    def _plan(self) -> Step:
        mode, k = self._decide()
        self.counters[f"steps_{mode}"] += 1
        pend = self.pending
        segs: list[list[PhaseT]] = []
        if pend:
            segs.append(self._prefill(pend, drafter=mode != "ar"))
            self.produced[pend] = np.maximum(self.produced[pend], 1)   # a first token if fresh
        if mode == "psd":                                # newcomers join the smaller batch
            self.batch[pend] = -1
            for r in pend:
                sizes = [sum(1 for x in self.running if self.batch[x] == b) for b in (0, 1)]
                self.batch[r] = 0 if sizes[0] <= sizes[1] else 1
        live = [r for r in self.running if self.produced[r] < self.output[r]]
        label = "ar" if mode == "ar" else f"{mode}{k}"
        step = Step(label, segs, k=k)
        if not live:
            return step
        if mode == "ar":
            segs.append([self._verify(step, live, [0] * len(live))])
        elif mode == "sd":
            segs.append([self._draft(step, live, k)])
            segs.append([self._verify(step, live, step.drafted_k)])
        else:
            self._psd(step, live, k)
        return step

    def _prefill(self, ids: list[int], drafter: bool) -> list[PhaseT]:
        """The admissions' prefill on the target, and on the drafter when the step speculates
        or when the drafter's prefill is hidden behind the target's (no longer: it runs at the
        same time on its own device), as with a small drafter on a GPU of its own.  A
        re-admitted (preempted) request recomputes its prompt and the tokens it generated."""
        lengths = self.prompt[ids] + self.produced[ids]
        tokens = int(lengths.sum())
        out: list[PhaseT] = []
        t_target = 0.0
        for dev, model, key in ((self.target_dev, self.target, "prefill_t"),
                                (self.drafter_dev, self.drafter, "prefill_d")):
            passes = int(model.prefill_passes(lengths).sum())
            dur = float(prefill_time(model, np.array([passes]), np.array([tokens]))[0])
            if model is self.drafter:
                drafter = drafter or (self.policy.cfg.modes != ("ar",) and dur <= t_target)
                if not drafter:
                    break
            else:
                t_target = dur
            out.append(("prefill", dev, dur * self._factor(key), len(ids), tokens, 0))
        self.lag[ids] = 0 if drafter else lengths
        return out

    def _draft(self, step: Step, ids: list[int], k: int) -> PhaseT:
        arr = np.asarray(ids, np.int64)
        lag = self.lag[arr]
        ctx = int(self.ctx(arr).sum())
        dur = 0.0
        if lag.any():
            late = lag[lag > 0]
            passes = int(self.drafter.prefill_passes(late).sum())
            dur = float(cost_time(self.drafter, [passes], [int(late.sum())], [ctx])[0])
            self.counters["catch_up_tokens"] += int(late.sum())
            self.policy.note_cost("catch_up", dur)
        ks = self._ks(ids, k)
        if self.cap:
            dur += capped_draft_phase(self.drafter, self._host(), np.asarray(ks, np.int64),
                                      self.ctx(arr))
        else:
            dur += draft_phase(self.drafter, self._host(), len(ids), k, ctx)
        dur *= self._factor("draft")
        step.drafted, step.drafted_k = list(ids), ks
        self.last_draft_s = dur
        return ("draft", self.drafter_dev, dur, len(ids), sum(ks), ctx)

    def _verify(self, step: Step, ids: list[int], ks: list[int]) -> PhaseT:
        arr = np.asarray(sorted(ids), np.int64)
        want = dict(zip(ids, ks, strict=True))
        kk = np.asarray([want[r] for r in arr.tolist()], np.int64)
        acc = np.zeros(arr.size, np.int64)
        spec = kk > 0
        if spec.any():
            at_pos = getattr(self.acceptance, "sample_at", None)
            sel, par = arr[spec], self.params[arr[spec]]
            draw = (self.acceptance.sample(self.rng, par, kk[spec]) if at_pos is None
                    else at_pos(self.rng, par, kk[spec], self.produced[sel]))
            acc[spec] = np.minimum(np.asarray(draw, np.int64), kk[spec])
        emit = np.minimum(acc + 1, self.output[arr] - self.produced[arr])
        step.verified = list(zip(arr.tolist(), kk.tolist(), acc.tolist(), emit.tolist(),
                                 strict=True))
        ctx = int(self.ctx(arr).sum())
        # capped proposals: every row computed at the longest row's width (the runtime pads)
        tokens = int(arr.size * (kk.max() + 1)) if self.cap else int((kk + 1).sum())
        dur = verify_phase(self.target, self._host(), int(arr.size), tokens, ctx)
        return ("verify", self.target_dev, dur * self._factor("verify"), int(arr.size), tokens,
                ctx)

    def _psd(self, step: Step, live: list[int], k: int) -> None:
        members = [[r for r in live if self.batch[r] == b] for b in (0, 1)]
        if self.ready is not None and not members[self.ready]:
            self.ready = None
        if self.ready is None:
            nonempty = [b for b in (0, 1) if members[b]]
            if len(nonempty) == 1:                         # one batch: an SD step
                b = nonempty[0]
                step.segments.append([self._draft(step, members[b], k)])
                step.segments.append([self._verify(step, members[b], step.drafted_k)])
                step.verify_batch = step.draft_batch = b
                return
            y = 0 if len(members[0]) >= len(members[1]) else 1
            cost = self._draft(step, members[y], k)
            self.policy.note_cost("psd_startup", cost[2])
            step.segments.append([cost])
            step.draft_batch = step.ready_after = y
            return
        x = self.ready
        y = 1 - x
        phases = [self._verify(step, members[x], [int(self.held[r]) for r in members[x]])]
        if members[y]:
            phases.append(self._draft(step, members[y], k))
            step.draft_batch = step.ready_after = y
        step.segments.append(phases)
        step.verify_batch = x

    # ------------------------------------------------------------------ commit
    def commit(self, step: Step) -> None:
        """Advance the clock to the step's end and apply what it did."""
        ends = step.ends
        end = step.end
        fresh = [r for r in self.pending if np.isnan(self.first_t[r])]   # not re-admissions
        self.first_t[fresh] = ends[-1] if self.first_at_end else ends[0]
        done = [r for r in self.pending if self.output[r] <= 1]
        for r in done:
            self.finish_t[r] = self.first_t[r]
        self.held[[r for r, *_ in step.verified]] = 0
        mode = self.mode[0] if self.mode else "ar"
        for r, p, _a, e in step.verified:
            self.produced[r] += e
            if p == 0 and r not in step.drafted:
                self.lag[r] += e                          # the drafter did not see these
            if self.produced[r] >= self.output[r]:
                self.finish_t[r] = end
                done.append(r)
        if step.drafted:
            self.lag[step.drafted] = 0
            if mode == "psd" and step.ready_after is not None:
                self.held[step.drafted] = step.drafted_k
        self.ready = step.ready_after if mode == "psd" else None
        self.tracker.update([(p, a) for _r, p, a, _e in step.verified])
        gone = set(done)
        self.running = [r for r in self.running if r not in gone]
        self.batch[list(gone)] = -1
        self.finished = sorted(gone, key=lambda r: (self.finish_t[r], r))
        self.counters["completions"] += len(gone)
        self.counters["steps"] += 1
        self.counters["intervals"] += 1
        self.pending = []
        self.now = end
        self.step += 1

    def summary(self) -> dict[str, Any]:
        """Switches, transitions, the switch costs paid and the choice timeline (the trace
        header's ``extra["adaptive"]``)."""
        st = self.policy.stats
        c = self.counters
        return {"switches": c["switches"], "transitions": dict(st["transitions"]),
                "switch_cost_s": dict(st["switch_cost_s"]),
                "catch_up_tokens": c["catch_up_tokens"], "drafts_dropped": c["drafts_dropped"],
                "steps": {m: c[f"steps_{m}"] for m in STEP_MODES},
                "timeline": [[t, label] for t, label in self.timeline]}

    def request_record(self, r: int) -> RequestRecord:
        return RequestRecord(id=int(r), arrival=float(self.arrival[r]),
                             admitted=float(self.admitted_t[r]),
                             first_token=float(self.first_t[r]), finish=float(self.finish_t[r]),
                             prompt_len=int(self.prompt[r]), output_len=int(self.output[r]),
                             preemptions=int(self.kv.preempts[r]))


def segment_ends(start: float, step: Step) -> list[float]:
    """The clock after each segment: ``now + longest phase`` per segment, as SimPy adds it."""
    ends, now = [], start
    for seg in step.segments:
        now = now + max(p[2] for p in seg)
        ends.append(now)
    return ends
