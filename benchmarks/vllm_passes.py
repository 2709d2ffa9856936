"""psdlab's CPU runner against vLLM's, pass for pass: the same model on one core, the same pass
shapes (a verification of m x (k + 1) tokens, a decode step of m x 1), at about the context the
benchmark's runs had.  psdlab's side is timed here (a worker process pinned to the target's
core, `runtime.runner.ModelRunner.verify` with the cache rolled back to the same context
before every pass); vLLM's side is read from the benchmark's traces (the target's phases of
that shape).  A slower runner distorts t / V and every figure built on them.
"""
from __future__ import annotations

import statistics
from typing import Any, Sequence


def psdlab_pass_times(model_dir: str, dtype: str, core: int, shapes: Sequence[tuple[int, int]],
                      context: int, repeats: int = 15) -> dict[tuple[int, int], float]:
    """Median seconds of one verification pass of ``seqs`` x ``tokens`` per shape."""
    from psdlab.runtime.runner import ModelSpec, RunnerConfig
    from psdlab.runtime.workers import ProcessWorker, WorkerSpec
    seqs_max = max(s for s, _ in shapes)
    runner = RunnerConfig(spec=ModelSpec(path=model_dir), dtype=dtype, max_slots=seqs_max,
                          max_len=context + max(t for _, t in shapes) + 8)
    worker = ProcessWorker(WorkerSpec(role="target", runner=runner, label=f"cpu:{core}",
                                      core=core, spin_s=0.5))
    out = {}
    try:
        worker.ready()
        slots = list(range(seqs_max))
        worker.submit("feed", slots, [0] * seqs_max,
                      [[(7 * i + j) % 1000 + 10 for j in range(context)] for i in slots])
        worker.wait()
        for seqs, tokens in shapes:
            times = []
            for _ in range(repeats + 2):                 # the first two warm up
                worker.submit("verify", slots[:seqs], [context] * seqs, [[11]] * seqs,
                              [[13] * (tokens - 1)] * seqs, None)
                res = worker.wait()
                times.append(res.end - res.start)
            out[(seqs, tokens)] = statistics.median(times[2:])
    finally:
        worker.close()
    return out


def vllm_pass_times(traces: Sequence[Any], shapes: Sequence[tuple[int, int]]
                    ) -> dict[tuple[int, int], float | None]:
    """Median seconds of the target's decode/verify phases of each (seqs, seqs x tokens) shape
    in vLLM's traces (steps with a prefill are left out: their pass is another shape)."""
    found: dict[tuple[int, int], list[float]] = {s: [] for s in shapes}
    for trace in traces:
        for step in trace.steps:
            if any(p.kind == "prefill" for p in step.phases):
                continue
            for p in step.phases:
                if p.kind != "verify" or p.seqs == 0:
                    continue
                shape = (p.seqs, p.tokens // p.seqs)
                if shape in found and p.tokens % p.seqs == 0:
                    found[shape].append(p.end - p.start)
    return {s: statistics.median(v) if v else None for s, v in found.items()}


def compare(psdlab: dict, vllm: dict) -> list[dict[str, Any]]:
    rows = []
    for shape, ours in psdlab.items():
        theirs = vllm.get(shape)
        rows.append({"seqs": shape[0], "tokens_per_seq": shape[1], "psdlab_ms": 1e3 * ours,
                     "vllm_ms": 1e3 * theirs if theirs else None,
                     "psdlab_over_vllm": ours / theirs if theirs else None})
    return rows
