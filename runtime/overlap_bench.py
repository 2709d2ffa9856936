"""`psdlab bench-runtime`: SD-separate against PSD on the same requests, same workers.

One set of workers (drafter on one device, target on another) serves the same greedy requests
as target-only AR (the reference outputs) and then, ``rounds`` times interleaved:
SD-separate with batch m, PSD with two batches of m (iso-batch, as the paper), and
PSD with two batches of m/2 (iso-concurrency: m running sequences, like SD).  From the traces:

- t, V: mean drafting and verification time per step, measured in the SD-separate run;
- measured gain: PSD / SD decode throughput (`analysis.metrics.summarize`);
- predicted gain: the closed form at equal acceptance, (t + V) / max(t, V);
- overlap: the share of PSD drafting time hidden under verification on the other device.

Outputs of every run are compared token for token with the AR outputs (greedy: lossless
means equal).
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from psdlab.analysis.atomic_write import write_text
from psdlab.analysis.metrics import summarize
from psdlab.analysis.trace import Trace
from psdlab.runtime.controller import Engine, EngineConfig
from psdlab.runtime.requests import Request
from psdlab.runtime.runner import ModelSpec
from psdlab.runtime.tracing import overlap_seconds


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def bench_runtime(target: ModelSpec, drafter: ModelSpec, requests: list[Request],
                  base: EngineConfig,
                  trace_dir: str | None = None, tokenizer: Any = None, quiet: bool = False,
                  warmup: bool = True, rounds: int = 2,
                  steps_fraction: float = 1.0, keep_outputs: bool = False,
                  corun: bool = False) -> dict[str, Any]:
    """Run SD-sep (m), PSD (2 x m) and PSD (2 x m/2) on the same workers, ``rounds`` times
    interleaved (so a busy spell of a shared machine hits every mode alike); return the
    figures computed over all rounds (with ``keep_outputs``, every run's token ids too).
    ``corun``: after the warm-up, the co-run probe on the same workers at m sequences, the
    runs' k and their mean prompt length (``runtime.corun_probe``; under ``corun_probe``, a
    ``CorunProbe``, and as ``corun_probe.json`` in ``trace_dir``)."""
    m = base.batch
    runs: dict[str, EngineConfig] = {"sd": replace(base, mode="sd-sep", max_num_seqs=None),
                                     "psd": replace(base, mode="psd", max_num_seqs=None)}
    if m >= 2:
        runs["psd_iso_concurrency"] = replace(base, mode="psd", batch=m // 2, max_num_seqs=None)
    workers = replace(base, mode="psd", max_num_seqs=None)
    if trace_dir:
        os.makedirs(trace_dir, exist_ok=True)
    summaries: dict[str, list[dict]] = {}
    outputs: dict[str, list] = {}
    # controlled acceptance (base.controlled_alpha) proposes the AR run's continuation: the
    # AR and warm-up runs go without it, the speculative runs get the AR outputs
    reference: dict | None = None
    plain = replace(base, controlled_alpha=None)
    with Engine(workers, target, drafter, tokenizer) as eng:
        if warmup:
            _say("bench-runtime: warming up the workers", quiet)
            eng.run(requests[:2], None, config=replace(plain, mode="sd-sep", max_num_seqs=None,
                                                       max_new_tokens=4))

        def measure(name: str, cfg: EngineConfig, tag: str, extra: dict) -> None:
            nonlocal reference
            _say(f"bench-runtime: {tag}{name}: {cfg.mode}, batch {cfg.batch}, "
                 f"{len(requests)} requests", quiet)
            path = str(Path(trace_dir) / f"{name}{extra.get('suffix', '')}.jsonl") \
                if trace_dir else None
            result = eng.run(requests, path, config=cfg, run_extra={"bench": name, **extra},
                             reference=reference if cfg.controlled_alpha is not None else None)
            if cfg.mode == "ar":
                reference = {o.id: list(o.token_ids) for o in result.outputs}
            if result.interrupted:
                raise KeyboardInterrupt
            summary = summarize(result.trace, steps_fraction=steps_fraction)
            summary["shorter_hidden_fraction"] = shorter_hidden_fraction(result.trace)
            summary["mean_overlapped_max_s"] = mean_overlapped_max(result.trace)
            summaries.setdefault(name, []).append(summary)
            outputs[f"{name}{extra.get('suffix', '')}"] = [o.token_ids for o in result.outputs]

        probe = None
        if corun:
            _say("bench-runtime: co-run probe", quiet)
            probe = _corun(eng, requests, base, workers.slots)
            if trace_dir:
                write_text(str(Path(trace_dir) / "corun_probe.json"),
                           json.dumps(probe.to_dict(), indent=1) + "\n")
        measure("ar", replace(plain, mode="ar", max_num_seqs=None), "reference outputs: ", {})
        for r in range(rounds):
            for name, cfg in runs.items():
                measure(name, cfg, f"round {r + 1}/{rounds}: ",
                        {"round": r + 1, "suffix": f"_r{r + 1}"})
    merged = {name: merge_summaries(s) for name, s in summaries.items()}
    fig = figures(merged, outputs, base, rounds)
    fig["measured_gain_by_round"] = [_gain(p, q, "decode_throughput_tok_s")
                                     for p, q in zip(summaries["psd"], summaries["sd"])]
    if keep_outputs:
        fig["outputs"] = outputs
    if probe is not None:
        fig["corun_probe"] = probe
    return fig


def _corun(eng: Any, requests: list[Request], base: EngineConfig, slots: int) -> Any:
    """The co-run probe on an engine's workers (``runtime.corun_probe``)."""
    from psdlab.runtime.corun_probe import corun_probe
    lengths = [len(r.prompt_ids) for r in requests] or [16]
    context = max(1, min(int(sum(lengths) / len(lengths)), base.max_len - base.k - 8))
    return corun_probe(eng.target, eng.drafter, seqs=min(base.batch, slots), ks=(base.k,),
                       context=context, reps=8, slots=slots)


def cycle_requests(requests: list[Request], n: int) -> list[Request]:
    """The first ``n`` requests, the list repeated as often as needed (repeats get ids
    ``"<id>#2"``, ``"<id>#3"``, ...): a batch larger than the prompt set still holds distinct
    sequences of the same prompts (greedy: a repeat generates the same tokens)."""
    if not requests:
        raise ValueError("requests: the prompts file holds no prompts")
    out = []
    for i in range(n):
        r = requests[i % len(requests)]
        rep = i // len(requests)
        out.append(replace(r, id=f"{r.id}#{rep + 1}") if rep else r)
    return out


def merge_summaries(items: list[dict]) -> dict[str, Any]:
    """Pool rounds: decode throughput = all decode tokens / all decode time; phase times,
    acceptance and overlap are means over rounds."""
    def mean(key: str) -> float | None:
        vals = [s[key] for s in items if s.get(key) is not None]
        return sum(vals) / len(vals) if vals else None
    tokens = sum(s.get("decode_tokens") or 0 for s in items)
    time_s = sum(s.get("decode_time_s") or 0.0 for s in items)
    out_tok = sum(s.get("output_tokens") or 0 for s in items)
    makespan = sum(s.get("makespan_s") or 0.0 for s in items)
    return {"requests": items[0].get("requests"),
            "decode_throughput_tok_s": tokens / time_s if time_s else None,
            "throughput_tok_s": out_tok / makespan if makespan else None,
            **{k: mean(k) for k in ("mean_draft_time_s", "mean_verify_time_s",
                                    "draft_hidden_fraction", "mean_acceptance_length",
                                    "shorter_hidden_fraction", "mean_overlapped_max_s")}}


def mean_overlapped_max(trace: Trace) -> float | None:
    """Mean over overlapped steps of max(drafting time, verification time)."""
    vals = []
    for step in trace.steps:
        if step.overlapped:
            d = sum(p.end - p.start for p in step.phases if p.kind == "draft")
            v = sum(p.end - p.start for p in step.phases if p.kind == "verify")
            vals.append(max(d, v))
    return sum(vals) / len(vals) if vals else None


def shorter_hidden_fraction(trace: Trace) -> float | None:
    """Over overlapped steps: time drafting and verification ran at once / the time of the
    shorter of the two phases (1.0 = the shorter phase was hidden entirely)."""
    hidden = shorter = 0.0
    for step in trace.steps:
        if not step.overlapped:
            continue
        d = sum(p.end - p.start for p in step.phases if p.kind == "draft")
        v = sum(p.end - p.start for p in step.phases if p.kind == "verify")
        hidden += overlap_seconds(step.phases)
        shorter += min(d, v)
    return hidden / shorter if shorter > 0 else None


def _gain(a: dict, b: dict, key: str) -> float | None:
    x, y = a.get(key), b.get(key)
    return x / y if x and y else None


def figures(summaries: dict[str, dict], outputs: dict[str, list], base: EngineConfig,
            rounds: int = 1) -> dict[str, Any]:
    sd, psd = summaries["sd"], summaries["psd"]
    t, v = sd["mean_draft_time_s"], sd["mean_verify_time_s"]
    predicted = (t + v) / max(t, v) if t and v else None
    iso_c = summaries.get("psd_iso_concurrency")
    out = {
        "k": base.k, "m": base.batch, "requests": sd["requests"], "rounds": rounds,
        "t_ms": 1e3 * t if t else None, "v_ms": 1e3 * v if v else None,
        "measured_gain": _gain(psd, sd, "decode_throughput_tok_s"),
        "predicted_gain": predicted,
        "overlap": psd.get("draft_hidden_fraction"),
        "overlap_shorter_phase": psd.get("shorter_hidden_fraction"),
        "measured_gain_iso_concurrency": (_gain(iso_c, sd, "decode_throughput_tok_s")
                                          if iso_c else None),
        "measured_gain_makespan": _gain(psd, sd, "throughput_tok_s"),
        "t_psd_ms": 1e3 * psd["mean_draft_time_s"] if psd.get("mean_draft_time_s") else None,
        "v_psd_ms": 1e3 * psd["mean_verify_time_s"] if psd.get("mean_verify_time_s") else None,
        "lossless": all(o == outputs["ar"] for o in outputs.values()),
    }
    if out["measured_gain"] and predicted:
        out["gain_share_of_predicted"] = out["measured_gain"] / predicted
    # the same closed form with the step time PSD really had: max(t, V) as measured while
    # both ran at once (cores share memory bandwidth and the machine's other load)
    step = psd.get("mean_overlapped_max_s")
    out["psd_overlapped_step_ms"] = 1e3 * step if step else None
    out["predicted_gain_contended"] = (t + v) / step if t and v and step else None
    for name, s in summaries.items():
        out[f"{name}_decode_tok_s"] = s.get("decode_throughput_tok_s")
        out[f"{name}_mean_acceptance_length"] = s.get("mean_acceptance_length")
    return out


def format_overlap_report(fig: dict[str, Any]) -> str:
    def f(x: Any, spec: str = ".3f") -> str:
        return "n/a" if x is None else format(x, spec)
    lines = [
        f"bench-runtime: k={fig['k']}  m={fig['m']}  requests={fig['requests']}  "
        f"rounds={fig['rounds']}  "
        f"(drafter and target on separate devices, greedy)",
        f"  drafting time t per step (SD-sep)     {f(fig['t_ms'], '.1f')} ms "
        f"(in PSD {f(fig['t_psd_ms'], '.1f')} ms)",
        f"  verification time V per step (SD-sep) {f(fig['v_ms'], '.1f')} ms "
        f"(in PSD {f(fig['v_psd_ms'], '.1f')} ms)",
        f"  PSD/SD throughput, iso-batch (2 x m)  {f(fig['measured_gain'])} (by round: "
        f"{', '.join(f(g) for g in fig.get('measured_gain_by_round', []))})",
        f"  PSD/SD throughput, iso-concurrency    {f(fig['measured_gain_iso_concurrency'])}",
        f"  predicted (t + V) / max(t, V)         {f(fig['predicted_gain'])}",
        f"  measured / predicted                  {f(fig.get('gain_share_of_predicted'))}",
        f"  predicted with PSD's own step time    {f(fig.get('predicted_gain_contended'))} "
        f"((t + V) / mean max(t, V) of overlapped PSD steps = "
        f"{f(fig.get('psd_overlapped_step_ms'), '.1f')} ms)",
        f"  overlap (drafting hidden)             {f(fig['overlap'])}",
        f"  overlap (shorter phase hidden)        {f(fig.get('overlap_shorter_phase'))}",
        f"  outputs equal target-only (AR) output {fig['lossless']}",
    ]
    return "\n".join(lines)

