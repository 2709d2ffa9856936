"""Why the first bench_vllm measured PSD at 0.35x SD: where vLLM's in-process engine really runs.

Three measurements on the real SmolLM2-135M target (8 prompts x 48 tokens, AR, m = 4):
1. unbound: the engine without psdlab's binding (as before it: VLLM_CPU_OMP_THREADS_BIND is
   never read in-process): the affinity and torch threads read inside vLLM's scheduler, and the speed;
2. bound, each configuration in a fresh process: one core, two cores;
3. bound, one process: a one-core run, then a two-core run (per-process state).
Writes cpu_binding_diagnosis.json beside this file.
Run:  cd benchmarks && ../.ci-venv-vllm/bin/python ../results/vllm/cpu_binding_diagnosis.py
"""
import json, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
from bench_vllm import smollm2_pair, prompts_for
from psdlab.analysis.trace import read_trace
from psdlab.runtime.vllm_ext import engine as E


def one(cfg, prompts, how):
    r = {"fresh": E.run_vllm_isolated, "same": E.run_vllm, "unbound": E._generate}[how](
        *((cfg, prompts, False) if how == "unbound" else (cfg, prompts)))
    extra = read_trace(cfg.trace).run.extra
    return {"cores": cfg.target_cores, "process": how, "tok_s": sum(map(len, r.outputs)) / r.wall_s,
            "affinity_in_scheduler": extra.get("target_affinity"),
            "torch_threads_in_scheduler": extra.get("target_torch_threads")}


def main():
    E.quiet_vllm_logs()
    target, draft, _ = smollm2_pair("auto")
    prompts = prompts_for(target, 8)
    import tempfile
    out = tempfile.mkdtemp(prefix="psdlab-cpu-binding-")
    cfg = lambda cores, i: E.VllmRunConfig(mode="ar", target=target, k=4, batch=4,
                                           max_new_tokens=48, ignore_eos=True,
                                           max_model_len=1024, target_cores=cores,
                                           trace=f"{out}/{i}.jsonl")
    rows = [one(cfg("1", 0), prompts, "fresh"), one(cfg("0-1", 1), prompts, "fresh"),
            one(cfg("1", 2), prompts, "same"), one(cfg("0-1", 3), prompts, "same")]
    from psdlab.validation.results_file import git_info, machine_info
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing as mp
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:  # a fresh process
        rows.insert(0, pool.submit(one, cfg("1", 4), prompts, "unbound").result())
    res = {"machine": {**machine_info(), **git_info(),
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
           "rows": rows}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_binding_diagnosis.json")
    with open(path, "w") as fh:
        json.dump(res, fh, indent=1)
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
