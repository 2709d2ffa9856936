"""Why the tiny vLLM PSD run's phases did not intersect: dispatch order x drafter idle spin."""
import dataclasses, json, os, statistics, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0"); os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
from psdlab.runtime.vllm_ext import scheduler as S, settings as ST, patches
from psdlab.runtime.vllm_ext.engine import VllmRunConfig, run_vllm, quiet_vllm_logs
from psdlab.runtime.vllm_ext.tiny import tiny_pair, tiny_prompts
def main():
    global new_schedule, orig_dc
    quiet_vllm_logs()
    import tempfile
    pair = tiny_pair(tempfile.mkdtemp(prefix="psdlab-tiny-"))
    prompts = tiny_prompts(6, seed=3)
    new_schedule = S.PSDScheduler._schedule
    orig_dc = ST.PsdSettings.draft_config

    def late_schedule(self, *args, **kwargs):   # the old order: schedule the verify half, then dispatch
        self._collect(); self.step_index += 1
        plan = self.halves.begin_step([r.request_id for r in self.running], self._drafts)
        for rid in plan.gone:
            self.drafter.release(rid); self._drafts.pop(rid, None)
        if plan.draft is None and self._submit(plan.verify, plan.verify_ids):
            self._collect(upcoming=True)
        for rid in plan.verify_ids:
            req = self.requests.get(rid); base, drafts = self._drafts.pop(rid, (-1, []))
            if req is not None:
                ok = base == req.num_tokens and self._ready(req)
                req.spec_token_ids = drafts[:self.psd.k] if ok else []
        hidden = [r for r in self.running if self.halves.half_of(r.request_id) == plan.draft]
        with patches.hide_running(self, hidden):
            out = S.TracingScheduler._schedule(self, *args, **kwargs)
        self.events.append(("scheduled", self.step_index, plan.verify))
        self.halves.admit([r.request_id for r in self.running if r.request_id not in self.halves], plan)
        self._step_meta = {"verify_batch": plan.verify, "draft_batch": plan.draft}
        if plan.draft is not None:
            self._submit(plan.draft, plan.draft_ids)
        return out

    rows = []
    for order in ("late", "early"):
        for spin in (0.0, 1.0):
            S.PSDScheduler._schedule = late_schedule if order == "late" else new_schedule
            ST.PsdSettings.draft_config = lambda self, *a, _s=spin, **k: dataclasses.replace(orig_dc(self, *a, **k), spin_s=_s)
            for rep in range(2):
                cfg = VllmRunConfig(mode="psd", target=pair["target"], draft=pair["draft"], k=3, batch=3,
                                    max_new_tokens=20, ignore_eos=True, max_model_len=128, trace=None)
                r = run_vllm(cfg, prompts)
                drafted = [s for s in r.trace.steps if s.draft_batch is not None]
                lag, ver, dr = [], [], []
                for s in drafted:
                    ph = {p.kind: p for p in s.phases}
                    d, v = ph["draft"], ph.get("verify")
                    lag.append(1e3 * (d.start - v.start)); ver.append(1e3 * (v.end - v.start)); dr.append(1e3 * (d.end - d.start))
                rows.append(dict(order=order, spin_s=spin, rep=rep, drafted_steps=len(drafted),
                                 intersecting=sum(s.overlapped for s in drafted),
                                 median_draft_start_minus_verify_start_ms=round(statistics.median(lag), 2),
                                 median_verify_ms=round(statistics.median(ver), 2), median_draft_ms=round(statistics.median(dr), 2)))
                print(json.dumps(rows[-1]), flush=True)
    json.dump(rows, open(sys.argv[1] if len(sys.argv) > 1 else "tiny_overlap_diagnosis.json", "w"), indent=1)

if __name__ == '__main__':
    main()
