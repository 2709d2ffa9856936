"""One run of the engine: the admission and step loops behind `Engine.run`.

Kept apart from `runtime.controller` (configuration, workers) to keep each file short.  The loop
talks to the workers only through ``submit`` / ``wait``; in a PSD overlapped step it submits
the draft of batch Y and the verification of batch X before waiting for either, so the two run
at the same time on their devices.
"""
from __future__ import annotations

import sys
import time
from collections import deque
from dataclasses import replace
from typing import Any, Callable, Hashable, Sequence, cast

import numpy as np

from psdlab.analysis.trace import RunInfo, Verified
from psdlab.runtime.batch_manager import BatchManager
from psdlab.runtime.controlled_drafts import ControlledProposer
from psdlab.runtime.run_state import EngineResult, StopFlag, drafter_died_message, now
from psdlab.runtime.requests import Request, RequestOutput, Seq
from psdlab.runtime.runner import PREFILL_RULES
from psdlab.runtime.tracing import RuntimeTracer
from psdlab.runtime.workers import WorkerDied


class _Loop:
    def __init__(self, engine: Any, requests: list[Request],
                 reference: dict[Hashable, list[int]] | None,
                 progress: Callable[[int, int], None] | None,
                 on_step: Callable[[Any, int], bool | None] | None):
        self.engine, self.cfg = engine, engine.cfg
        ids = [r.id for r in requests]
        if len(set(ids)) != len(ids):
            raise ValueError("requests: ids must be unique")
        self.requests = requests
        self.controlled = None
        if self.cfg.controlled_alpha is not None:
            if reference is None:
                raise ValueError("controlled_alpha: needs the reference (target greedy) outputs")
            self.controlled = ControlledProposer(self.cfg.controlled_alpha, reference,
                                                 engine.vocab_size, seed=self.cfg.seed)
        self.target = engine.target
        spec = self.cfg.spec                            # the mode's registry entry
        self.drafter = engine.drafter if spec.drafting else None
        self.waiting = deque(sorted(requests, key=lambda r: r.arrival))
        self.active: dict[Hashable, Seq] = {}
        self.free = list(range(self.cfg.slots))
        self.psd = spec.batches == 2                    # two batches (psd; adaptive's PSD steps)
        self.k = self.cfg.k                             # draft length of the next drafting
        self.adaptive = None                            # --mode adaptive: chooses each step
        if spec.policy:
            from psdlab.runtime.adaptive_driver import AdaptiveDriver
            self.adaptive = AdaptiveDriver(self.cfg, self)
        self.bm = BatchManager(self.cfg.batch) if self.psd else None
        self.pending: int | None = None
        self.admit_rank: dict[Hashable, int] = {}       # admission order (PSD rebalancing)
        self.last_verified: int | None = None
        self.outputs: dict[Hashable, RequestOutput] = {}
        self.progress, self.on_step = progress, on_step
        self.failure: str | None = None
        self.notes: list[str] = []
        self.tracer: RuntimeTracer          # made by execute, before any step
        self.t0 = 0.0

    # ------------------------------------------------------------------ run
    def execute(self, info: RunInfo, trace_path: Any) -> EngineResult:
        self.t0 = now()
        self.tracer = RuntimeTracer(trace_path, info, self.t0)
        interrupted, error = False, None
        try:
            with StopFlag() as stop:
                while True:
                    if stop.requested:
                        interrupted = True
                        break
                    self._admit()
                    self._rebalance()
                    if not self.active:
                        if not self.waiting:
                            break
                        time.sleep(max(0.0, min(0.05, self.t0 + self.waiting[0].arrival - now())))
                        continue
                    self._step()
                    # a hook that returns True ends the run here (outputs so far: prefixes)
                    if self.on_step is not None and self.on_step(self, self.tracer.index):
                        break
        except KeyboardInterrupt:
            interrupted = True
        except WorkerDied as exc:                   # the target is gone: nothing can go on
            error = f"{exc}; the run stopped, the trace holds every step so far"
            self._say(f"psdlab: {error}")
        finally:
            self.tracer.close()
        if self.adaptive is not None:                   # the policy's counts, in memory
            run = self.tracer.trace.run
            self.tracer.trace.run = replace(run, extra={**run.extra,
                                                        "adaptive": self.adaptive.summary()})
        return EngineResult(outputs=self._outputs(), trace=self.tracer.trace,
                            interrupted=interrupted, drafter_failure=self.failure,
                            wall_s=now() - self.t0, notes=self.notes, error=error)

    def _outputs(self) -> list[RequestOutput]:
        out = []
        for r in self.requests:
            if r.id in self.outputs:
                out.append(self.outputs[r.id])
                continue
            seq = self.active.get(r.id)
            toks = list(seq.out) if seq else []
            out.append(RequestOutput(r.id, list(r.prompt_ids), toks, self._text(toks),
                                     None, None, r.prompt_text))
        return out

    def _text(self, toks: list[int]) -> str | None:
        tok = self.engine.tokenizer
        return tok.decode(toks, skip_special_tokens=True) if tok is not None else None

    def _say(self, message: str) -> None:
        self.notes.append(message)
        print(message, file=sys.stderr)

    # ------------------------------------------------------------------ admission
    def _admit(self) -> None:
        t = now() - self.t0
        new: list[Seq] = []
        while (self.waiting and self.waiting[0].arrival <= t and self.free
               and (self.bm is None or self.bm.has_room())):
            req = self.waiting.popleft()
            n, cap = len(req.prompt_ids), self.cfg.max_len
            if n == 0 or n + 1 > cap:
                why = ("the prompt is empty" if n == 0 else
                       f"prompt has {n} tokens but the context holds {cap} "
                       f"(prompt + at least one generated token)")
                self._say(f"psdlab: request {req.id}: {why}; skipped, the others go on")
                self.outputs[req.id] = RequestOutput(req.id, list(req.prompt_ids), [], None,
                                                     "error", why, req.prompt_text)
                self._progress()
                continue
            eos = None if self.cfg.ignore_eos else self.cfg.eos_token_id
            seq = Seq(req, self.free.pop(0), req.max_new_tokens or self.cfg.max_new_tokens,
                      cap, eos)
            seq.admitted = now()
            self.admit_rank[seq.id] = len(self.admit_rank)
            if self.bm is not None:
                seq.batch = self.bm.assign(seq.id, draft_batch=self._next_draft_batch())
            self.active[seq.id] = seq
            new.append(seq)
        if new:
            self._prefill(new)

    def _next_draft_batch(self) -> int | None:
        return None if self.pending is None else 1 - self.pending

    def _prefill(self, new: list[Seq]) -> None:
        """Prefill new sequences on the target (first token) and the drafter at once; written
        as a step of its own so decode steps stay free of prefill work."""
        t = now()
        slots, rows = [s.slot for s in new], [list(s.tokens) for s in new]
        # adaptive: only while it speculates (the drafter catches up when speculation starts)
        feed = self.drafter is not None and (self.adaptive is None or self.adaptive.feeds())
        if feed:
            assert self.drafter is not None
            self.drafter.submit("feed", slots, [0] * len(new), rows)
        self.target.submit("verify", slots, [0] * len(new), rows, [[] for _ in new], None)
        res = self.target.wait()
        lengths = [len(r) for r in rows]
        self.tracer.phase("prefill", self.target.label, res.start, res.end, len(new),
                          sum(lengths), chunks=PREFILL_RULES["target"].passes(lengths))
        for s, emitted in zip(new, res.value[1]):
            s.state["target"] = (len(s.tokens), [])
            s.state["drafter"] = (len(s.tokens), [])
            s.first_token = res.end
            s.append(emitted)
        if feed:
            assert self.drafter is not None
            label = self.drafter.label
            d = self._dwait()
            if d is not None:
                self.tracer.phase("prefill", label, d.start, d.end, len(new),
                                  sum(lengths), chunks=PREFILL_RULES["drafter"].passes(lengths))
            else:
                for s in new:
                    s.state["drafter"] = (0, [])
        elif self.drafter is not None:                  # not fed: nothing valid in its cache
            for s in new:
                s.state["drafter"] = (0, [])
        self.tracer.step(t, now())
        self._finish_done(new)

    # ------------------------------------------------------------------ workers
    def _dwait(self) -> Any:
        assert self.drafter is not None             # called after a drafter submit
        try:
            return self.drafter.wait()
        except WorkerDied as exc:
            self.failure = str(exc)
            self._say(drafter_died_message(exc, len(self.active)))
            self.drafter = None
            self.pending = None
            for s in self.active.values():
                s.drafts, s.draft_probs = [], None
            return None

    def _draft_submit(self, seqs: Sequence[Seq]) -> list[Seq]:
        ds = [s for s in seqs if not s.done and s.num_draft(self.k) >= 1]
        if not ds or self.drafter is None:
            return []
        keep = [s.valid_len("drafter") for s in ds]
        self._dcontext = sum(keep)      # one draft is in flight at a time
        self.drafter.submit("draft", [s.slot for s in ds], keep,
                            [s.tokens[kp:] for s, kp in zip(ds, keep)],
                            [s.num_draft(self.k) for s in ds])
        return ds

    def _draft_collect(self, ds: list[Seq], res: Any) -> None:
        own, probs = res.value
        for i, s in enumerate(ds):
            mine = [int(x) for x in own[i]]
            s.state["drafter"] = (len(s.tokens), mine[:-1])
            s.drafts = (self.controlled.propose(s.id, len(s.out), mine)
                        if self.controlled is not None else mine)
            s.draft_probs = _row(probs, i, len(mine)) if probs is not None else None
        assert self.drafter is not None             # it answered: see _dwait
        self.tracer.phase("draft", self.drafter.label, res.start, res.end, len(ds),
                          sum(len(s.drafts) for s in ds), context=self._dcontext)

    def _verify_submit(self, seqs: Sequence[Seq]) -> None:
        keep = [s.valid_len("target") for s in seqs]
        drafts = [list(s.drafts) for s in seqs]
        probs = None
        if any(s.draft_probs is not None for s in seqs):
            probs = _stack([s.draft_probs for s in seqs], max(len(d) for d in drafts),
                           self.engine.vocab_size)
        self._vrows = [s.tokens[kp:] for s, kp in zip(seqs, keep)]
        self._vcontext = sum(keep)
        self._vdrafts = drafts
        self.target.submit("verify", [s.slot for s in seqs], keep, self._vrows, drafts, probs)

    def _verify_collect(self, seqs: Sequence[Seq]) -> list[Verified]:
        res = self.target.wait()
        accepted, emitted = res.value
        out = []
        for s, d, a, e in zip(seqs, self._vdrafts, accepted, emitted):
            s.state["target"] = (len(s.tokens), d)
            n = s.append(e)
            # the trace carries the requests' own ids (int or str by its format), as given
            out.append(Verified(cast("int | str", s.id), len(d), int(a), n))
            s.drafts, s.draft_probs = [], None
        self.tracer.phase("verify", self.target.label, res.start, res.end, len(seqs),
                          sum(len(r) + len(d) for r, d in zip(self._vrows, self._vdrafts)),
                          context=self._vcontext)
        return out

    # ------------------------------------------------------------------ steps
    def now_rel(self) -> float:
        return now() - self.t0

    def _step(self) -> None:
        if self.adaptive is not None:
            self.adaptive.step(self)
        elif self.drafter is None:
            self._serial_step(list(self.active.values()), draft=False)
        elif not self.psd:
            self._serial_step(list(self.active.values()), draft=True)
        else:
            self._psd_step()

    def _serial_step(self, seqs: list[Seq], draft: bool, batch: int | None = None) -> None:
        """AR (draft=False) or SD: draft the batch, then verify it."""
        t = now()
        if draft:
            ds = self._draft_submit(seqs)
            if ds:
                res = self._dwait()
                if res is not None:
                    self._draft_collect(ds, res)
        self._verify_submit(seqs)
        verified = self._verify_collect(seqs)
        self.tracer.step(t, now(), verified, batch, batch if draft else None, False)
        self._finish_done(seqs)

    def _batch(self, b: int) -> list[Seq]:
        assert self.bm is not None                  # PSD only
        return [self.active[i] for i in self.bm.members(b)]

    def _psd_step(self) -> None:
        bm = self.bm
        assert bm is not None                       # PSD only
        if self.pending is not None and bm.size(self.pending) == 0:
            self.pending = None
        if self.pending is None:
            nonempty = [b for b in (0, 1) if bm.size(b)]
            if len(nonempty) == 1:                      # fallback: standard SD
                self._serial_step(self._batch(nonempty[0]), True, nonempty[0])
                self.last_verified = nonempty[0]
                return
            y = 0 if self.last_verified is None else 1 - self.last_verified
            t = now()                                   # first draft: not overlapped
            ds = self._draft_submit(self._batch(y))
            res = self._dwait() if ds else None
            if res is not None:
                self._draft_collect(ds, res)
            self.tracer.step(t, now(), (), None, y, False)
            self.pending = y if self.drafter is not None else None
            return
        x = self.pending
        y = 1 - x
        vx = self._batch(x)
        t = now()
        ds = self._draft_submit(self._batch(y)) if bm.size(y) else []
        self._verify_submit(vx)
        verified = self._verify_collect(vx)
        res = self._dwait() if ds else None
        if res is not None:
            self._draft_collect(ds, res)
        overlapped = res is not None and self.cfg.backend != "inline"
        self.tracer.step(t, now(), verified, x, y if ds else None, overlapped)
        self.last_verified = x
        self.pending = y if (bm.size(y) and self.drafter is not None) else None
        self._finish_done(vx)

    def _rebalance(self) -> None:
        """PSD: even out the two batches after the admissions (``BatchManager.rebalance``)."""
        if self.bm is None or self.drafter is None:
            return
        moves = self.bm.rebalance(prefer=[i for i, s in self.active.items() if not s.drafts],
                                  admitted=self.admit_rank)
        for sid, _src, dst in moves:
            s = self.active[sid]
            s.batch = dst
            s.drafts, s.draft_probs = [], None

    # ------------------------------------------------------------------ finishing
    def _finish_done(self, seqs: Sequence[Seq]) -> None:
        t = now()
        for s in seqs:
            if not s.done or s.id not in self.active:
                continue
            s.finish = t
            self.tracer.request(s.id, self.t0 + s.req.arrival, s.admitted, s.first_token,
                                s.finish, len(s.req.prompt_ids), len(s.out), s.batch)
            self.outputs[s.id] = RequestOutput(s.id, list(s.req.prompt_ids), list(s.out),
                                               self._text(s.out), s.reason, None,
                                               s.req.prompt_text)
            del self.active[s.id]
            self.free.append(s.slot)
            if self.bm is not None:
                self.bm.remove(s.id)
            self._progress()

    def _progress(self) -> None:
        if self.progress is not None:
            self.progress(len(self.outputs), len(self.requests))


def _row(probs: Any, i: int, n: int) -> Any:
    """Row i's first n draft distributions: a numpy copy (it came through a pipe), or a view of
    the drafter's device tensor (thread / inline workers: it never leaves the device)."""
    return probs[i, :n].copy() if isinstance(probs, np.ndarray) else probs[i, :n]


def _stack(rows: Sequence[Any], kmax: int, vocab: int) -> Any:
    """The verify batch's draft distributions [B, kmax, V], zeros where a row has none; on the
    drafter's device when the rows are tensors there."""
    ref = next(r for r in rows if r is not None)
    if isinstance(ref, np.ndarray):
        out: Any = np.zeros((len(rows), kmax, vocab), dtype=np.float32)
    else:
        import torch
        out = torch.zeros((len(rows), kmax, vocab), dtype=torch.float32, device=ref.device)
    for i, r in enumerate(rows):
        if r is not None:
            out[i, :len(r)] = r
    return out
