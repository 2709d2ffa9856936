"""Benchmark: psdlab's CPU runner with plain ``nn.Linear`` against oneDNN-packed weights
(`runtime.cpu_linear`), on one core.

Two figures per dtype, each the median (and min / max) of ``--repeats`` timings, in one run
so the ratios share the machine's state:

- ``gemm``: the matrix products alone of one pass of the model's shapes (every layer's
  qkv, o, gate/up and down products with distinct weights, so they stream from memory as in a
  real pass, plus the output head) at 4, 16 and 20 rows;
- ``runner``: `runtime.runner.ModelRunner` commands of the real target / drafter in a worker
  process pinned to the core, packed and not: a draft call (4 rows, 3 fed tokens, k = 4: one
  ragged pass and three decode passes) and a verification of 4 x 5 tokens.

Run:  .venv/bin/python benchmarks/bench_cpu_linear.py [--json] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

CORE = 1


def _stats(xs: list[float]) -> dict[str, float]:
    return {"median_ms": 1e3 * statistics.median(xs), "min_ms": 1e3 * min(xs),
            "max_ms": 1e3 * max(xs)}


def gemm_times(cfg, dtype_name: str, rows: int, repeats: int) -> dict[str, dict]:
    import torch
    import torch.nn.functional as F
    from psdlab.runtime.cpu_linear import PackedLinear
    dtype = getattr(torch, dtype_name)
    h, i = cfg.hidden_size, cfg.intermediate_size
    qkv = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
    shapes = [(qkv, h), (h, cfg.num_heads * cfg.head_dim), (2 * i, h), (h, i)]
    g = torch.Generator().manual_seed(0)
    weights = [[torch.randn(n, k, generator=g).to(dtype) for n, k in shapes]
               for _ in range(cfg.num_layers)] + [[torch.randn(cfg.vocab_size, h,
                                                               generator=g).to(dtype)]]
    packed = [[PackedLinear(w, None) for w in layer] for layer in weights]
    xs = {k: torch.randn(rows, k, generator=g).to(dtype) for k in {k for _, k in shapes}}

    def plain() -> None:
        for layer in weights:
            for w in layer:
                F.linear(xs[w.shape[1]], w)

    def onednn() -> None:
        for layer in packed:
            for lin in layer:
                lin(xs[lin.in_features])

    out: dict[str, Any] = {}
    with torch.inference_mode():
        for name, fn in (("nn_linear", plain), ("packed", onednn)):
            fn()
            ts = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            out[name] = _stats(ts)
    out["packed_over_plain"] = out["packed"]["median_ms"] / out["nn_linear"]["median_ms"]
    return out


def runner_times(model_dir: str, dtype: str, pack: bool, repeats: int,
                 context: int = 100) -> dict[str, dict]:
    from psdlab.runtime.runner import ModelSpec, RunnerConfig
    from psdlab.runtime.workers import ProcessWorker, WorkerSpec
    cfg = RunnerConfig(spec=ModelSpec(path=model_dir), dtype=dtype, max_slots=4,
                       max_len=context + 16, pack_weights=pack)
    w = ProcessWorker(WorkerSpec(role="target", runner=cfg, label=f"cpu:{CORE}", core=CORE,
                                 spin_s=0.5))
    slots = [0, 1, 2, 3]
    out = {}
    try:
        w.ready()
        w.submit("feed", slots, [0] * 4,
                 [[(7 * s + j) % 1000 + 10 for j in range(context)] for s in slots])
        w.wait()
        for name, args in (("draft_4x3_k4", ("draft", slots, [context] * 4, [[11] * 3] * 4,
                                            [4] * 4)),
                           ("verify_4x5", ("verify", slots, [context] * 4, [[11]] * 4,
                                           [[13] * 4] * 4, None))):
            ts = []
            for _ in range(repeats + 2):                     # two warm-ups
                w.submit(*args)
                res = w.wait()
                ts.append(res.end - res.start)
            out[name] = _stats(ts[2:])
        out["packed_linears"] = w.info.get("packed_linears", 0)
    finally:
        w.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", help="also write the report (JSON) to this file")
    args = ap.parse_args(argv)
    if CORE not in os.sched_getaffinity(0):
        raise SystemExit(f"bench_cpu_linear: needs CPU {CORE}")
    os.sched_setaffinity(0, {CORE})
    import torch
    torch.set_num_threads(1)
    from psdlab.runtime.model_pair import prepare_pair
    from psdlab.runtime.model_config import ModelConfig
    from psdlab.validation.results_file import git_info, machine_info
    load_before = list(os.getloadavg())
    pair = prepare_pair(progress=False)
    with open(os.path.join(pair.target_dir, "config.json"), encoding="utf-8") as fh:
        cfg = ModelConfig.from_hf(json.load(fh))
    report: dict = {"machine": {**machine_info(load_before), **git_info(),
                                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                    "core": CORE, "repeats": args.repeats, "gemm": {}, "runner": {}}
    for dtype in ("float32", "bfloat16"):
        report["gemm"][dtype] = {str(r): gemm_times(cfg, dtype, r, args.repeats)
                                 for r in (4, 16, 20)}
    for role, path, dtype in (("target", pair.target_dir, "float32"),
                              ("drafter", pair.drafter_dir, "bfloat16")):
        report["runner"][role] = {"dtype": dtype,
                                  **{("packed" if p else "nn_linear"):
                                     runner_times(path, dtype, p, args.repeats)
                                     for p in (False, True)}}
    text = json.dumps(report, indent=1)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    if args.json:
        print(text)
    else:
        for dtype, by_rows in report["gemm"].items():
            for rows, r in by_rows.items():
                print(f"gemm {dtype:9s} {rows:>3s} rows  "
                      f"nn.Linear {r['nn_linear']['median_ms']:6.1f}"
                      f" ms  packed {r['packed']['median_ms']:6.1f} ms  "
                      f"ratio {r['packed_over_plain']:.2f}")
        for role, r in report["runner"].items():
            for cmd in ("draft_4x3_k4", "verify_4x5"):
                a, b = r["nn_linear"][cmd], r["packed"][cmd]
                print(f"runner {role:7s} {r['dtype']:9s} {cmd:13s} nn.Linear "
                      f"{a['median_ms']:6.1f} ms [{a['min_ms']:.1f}-{a['max_ms']:.1f}]  packed "
                      f"{b['median_ms']:6.1f} ms [{b['min_ms']:.1f}-{b['max_ms']:.1f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
