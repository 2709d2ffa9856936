"""vLLM v1 scheduler classes (``SchedulerConfig.scheduler_cls`` / ``--scheduler-cls``) for psdlab.

- `TracingScheduler`: vLLM's own scheduler, unchanged, that also writes a psdlab trace
  (modes ``ar`` and ``sd``; in ``sd`` vLLM's own draft-model proposer drafts inside the model
  runner, so the step's one phase holds drafting and verification).
- `PSDScheduler`: batch-parallel SD.  The running requests are split into two halves
  (`runtime.vllm_ext.halves.Halves`); each step only the verify half is scheduled, carrying the
  drafts the drafter process made for it during the previous step, while the drafter drafts
  the other half.  vLLM's model runner verifies the drafts with its own rejection sampler (the
  runner's proposer is `runtime.vllm_ext.proposer.NullProposer`), so the output is lossless.

Both take their settings from ``vllm_config.additional_config["psdlab"]`` (see
`runtime.vllm_ext.settings`).  They use only the scheduler's public-by-convention surface
(``schedule``, ``update_from_output``, ``add_request``, ``finish_requests``,
``update_draft_token_ids``, ``shutdown``, ``running``, ``requests``); the version-dependent
bits (the running-request limits hidden half by half) live in `runtime.vllm_ext.patches`.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Hashable

from vllm.v1.core.sched.scheduler import Scheduler

from psdlab.analysis.trace import Verified
from psdlab.runtime.vllm_ext import patches
from psdlab.runtime.vllm_ext.settings import PsdSettings, run_info
from psdlab.runtime.vllm_ext.tracer import VllmTracer


class TracingScheduler(Scheduler):
    """vLLM's scheduler plus a psdlab trace of every step and request."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.psd = PsdSettings.from_vllm_config(self.vllm_config)
        self.tracer = VllmTracer(self.psd.trace, run_info(self.psd, self.vllm_config))
        self._t_sched = 0.0
        self._step_meta: dict[str, Any] = {}
        self._closed = False

    # ------------------------------------------------------------ requests
    def add_request(self, request: Any) -> None:
        super().add_request(request)
        self.tracer.arrived(request.request_id, request.num_prompt_tokens)

    def finish_requests(self, request_ids: Any, finished_status: Any) -> Any:
        ids = [request_ids] if isinstance(request_ids, str) else list(request_ids or [])
        result = super().finish_requests(request_ids, finished_status)
        now = time.perf_counter()
        for rid in ids:
            self.tracer.finished(rid, now)
        return result

    # ------------------------------------------------------------ steps
    def _schedule(self, *args: Any, **kwargs: Any) -> Any:
        return super().schedule(*args, **kwargs)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        out = self._schedule(*args, **kwargs)
        self._t_sched = time.perf_counter()
        for rid in out.num_scheduled_tokens:
            self.tracer.scheduled(rid, self._t_sched)
        for rid in getattr(out, "preempted_req_ids", None) or ():
            self.tracer.preempted(rid)
        return out

    def _half(self, rid: str) -> int | None:
        return None

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        t_end = time.perf_counter()
        spec = scheduler_output.scheduled_spec_decode_tokens
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        emitted: dict[str, int] = {}
        finished = []
        for eco in outputs.values():
            for o in eco.outputs:
                emitted[o.request_id] = len(o.new_token_ids)
                if o.finish_reason is not None:
                    finished.append(o.request_id)
        sampled = model_runner_output.sampled_token_ids or []
        index = model_runner_output.req_id_to_index
        verified = []
        for rid in scheduler_output.num_scheduled_tokens:
            n = emitted.get(rid, 0)
            if n <= 0:
                continue
            # vLLM pads a resumed request's drafts with -1: those were never proposed
            proposed = sum(1 for t in spec.get(rid, ()) if t >= 0)
            got = len(sampled[index[rid]]) if rid in index and index[rid] < len(sampled) else n
            accepted = min(proposed, max(got - 1, 0))
            verified.append(Verified(req=rid, proposed=proposed, accepted=accepted,
                                     emitted=min(n, accepted + 1)))
            self.tracer.emitted(rid, n, t_end, self._half(rid))
        new = {r.req_id for r in scheduler_output.scheduled_new_reqs}
        counts = scheduler_output.num_scheduled_tokens
        self.tracer.step(self._t_sched, t_end, self.psd.target_label, counts, new, verified,
                         preempted=list(getattr(scheduler_output, "preempted_req_ids", None)
                                        or ()), **self._step_meta)
        for rid in finished:
            self.tracer.finished(rid, t_end)
        return outputs

    def close_trace(self) -> None:
        """Write the last step and close the trace (idempotent)."""
        if not self._closed:
            self._closed = True
            self.tracer.close()

    def shutdown(self) -> None:
        self.close_trace()
        super().shutdown()


class PSDScheduler(TracingScheduler):
    """Two halves scheduled alternately; the other half drafted concurrently off-runner."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        from psdlab.runtime.vllm_ext.psd_drafter import DraftClient
        from psdlab.runtime.vllm_ext.halves import Halves
        cap = (self.scheduler_config.max_num_seqs + 1) // 2
        self.halves = Halves(cap)
        self.drafter = DraftClient(self.psd.draft_config(self.scheduler_config.max_num_seqs,
                                                         self.vllm_config.model_config
                                                         .max_model_len))
        self._drafts: dict[Hashable, tuple[int, list[int]]] = {}   # request id: (base, drafts)
        self.step_index = 0
        # (event, step, half): "submit" (drafting of a half dispatched), "scheduled" (the
        # verify half handed to vLLM), "output" (its result back), "collect" (drafts back).
        # The PSD structure is their order; the last 10,000 are kept.
        self.events: deque[tuple[str, int, int | None]] = deque(maxlen=10_000)
        self._submitted: tuple[int, int] | None = None    # (step, half) being drafted

    def _half(self, rid: str) -> int | None:
        return self.halves.half_of(rid)

    def _refresh(self) -> None:
        """Drop requests that left (finished, aborted, preempted) and rebalance the halves."""
        gone, _ = self.halves.refresh([r.request_id for r in self.running], self._drafts)
        for rid in gone:
            self.drafter.release(rid)
            self._drafts.pop(rid, None)

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        self.events.append(("output", self.step_index, self._step_meta.get("verify_batch")))
        self._refresh()
        return outputs

    def finish_requests(self, request_ids: Any, finished_status: Any) -> Any:
        result = super().finish_requests(request_ids, finished_status)
        self._refresh()
        return result

    def update_draft_token_ids(self, *args: Any, **kwargs: Any) -> None:
        return None   # the runner's NullProposer proposes nothing; our drafts come first

    def update_draft_token_ids_in_output(self, *args: Any, **kwargs: Any) -> None:
        return None

    def _ready(self, req: Any) -> bool:
        """Decoding (not mid-prefill), with one sampled token not yet in the KV cache."""
        return req.num_computed_tokens == req.num_tokens - 1 and not req.is_finished()

    def _rows(self, ids: Any) -> list[tuple[str, list[int], int]]:
        rows = []
        limit = self.vllm_config.model_config.max_model_len
        for rid in ids:
            req = self.requests.get(rid)
            if req is None or not self._ready(req):
                continue
            k = min(self.psd.k, limit - req.num_tokens - 1)
            if k >= 1:
                rows.append((rid, list(req.all_token_ids), k))
        return rows

    def _submit(self, half: int, ids: Any) -> bool:
        if not self.drafter.submit(self._rows(ids)):
            return False
        self._submitted = (self.step_index, half)
        self.events.append(("submit", self.step_index, half))
        return True

    def _collect(self, upcoming: bool = False) -> None:
        got, res = self.drafter.collect()
        if self._submitted is not None:
            self.events.append(("collect", *self._submitted))
            self._submitted = None
        if res is not None:
            self.tracer.draft_done(self.drafter.cfg.label, res.start, res.end, len(got),
                                   sum(len(d) for _, d in got.values()), upcoming=upcoming)
            self._drafts.update(got)

    def _schedule(self, *args: Any, **kwargs: Any) -> Any:
        """One PSD step: collect the drafts made during the last step, plan the halves,
        dispatch the drafting of the other half *first* (so the drafter starts while vLLM
        schedules and runs this half), then schedule the verify half with its drafts."""
        self._collect()
        self.step_index += 1
        plan = self.halves.begin_step([r.request_id for r in self.running], self._drafts)
        for rid in plan.gone:
            self.drafter.release(rid)
            self._drafts.pop(rid, None)
        if plan.draft is None and self._submit(plan.verify, plan.verify_ids):
            self._collect(upcoming=True)           # nothing to overlap: sequential SD
        for rid in plan.verify_ids:
            req = self.requests.get(rid)
            base, drafts = self._drafts.pop(rid, (-1, []))
            if req is not None:
                ok = base == req.num_tokens and self._ready(req)
                req.spec_token_ids = drafts[:self.psd.k] if ok else []
        if plan.draft is not None:
            # the draft half is hidden from this step's scheduling, so its rows are final now
            self._submit(plan.draft, plan.draft_ids)
        hidden = [r for r in self.running if self.halves.half_of(r.request_id) == plan.draft]
        with patches.hide_running(self, hidden):
            out = super()._schedule(*args, **kwargs)
        self.events.append(("scheduled", self.step_index, plan.verify))
        self.halves.admit([r.request_id for r in self.running
                           if r.request_id not in self.halves], plan)
        self._step_meta = {"verify_batch": plan.verify,
                           "draft_batch": plan.draft}
        return out

    def close_trace(self) -> None:
        if not self._closed:
            self._collect()
        super().close_trace()

    def shutdown(self) -> None:
        try:
            self.close_trace()
        finally:
            self.drafter.close()
            super().shutdown()
