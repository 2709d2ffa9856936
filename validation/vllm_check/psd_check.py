"""PSD inside vLLM as a held-out judge of `psdlab check-vllm`: predicted before it runs.

The measured side: psdlab's PSD scheduler inside vLLM (``psdlab run --engine vllm --mode psd``,
``runtime.vllm_ext``; offline, all prompts at t = 0, which is what it runs today) on the same
prompt file as the bench runs, EOS ignored, each PSD configuration ``repeats`` times in a
fresh process; and a co-run probe (``runtime.corun_probe`` through ``psdlab probe``) of the
same model pair on the same two cores PSD uses (the target's, and the drafter's on the
client's core, which an offline run leaves free).  The plugin exposes no way to run vLLM's
own drafter and target model runners at once outside a PSD step, so the probe runs on
psdlab's CPU runner of the same models, which prices the same passes within 1% of vLLM's
(docs/vllm.md, ``passes_psdlab_vs_vllm``).

The predicted side (`predict_psd`): the simulator with the served calibration's models
(``validation.serving_results.calibration.BenchFit``: fitted on the AR / SD server's bench
runs only; no PSD trace is among its inputs) in PSD mode at the run's k and m (two batches of
m, the batch manager's rebalancing, ``first_token = "step"`` as the calibration), and the
overlap contention of the probe (``analysis.contention.fit_corun``) applied as
``validation.compare.predict_trace`` applies a PSD calibration's: per role the scale of a
full step's solo times (``validation.replay_model.contention_scales``), weighted by the share
of decode time the first simulation ran overlapped (``validation.replay_scales.overlap_share``).
Of the PSD run only its workload is read (arrival 0, prompt and output lengths: what the
user's prompts and ``--max-new-tokens`` fix before any run); its timings never enter.

What differs between the served calibration runs and an offline PSD run (the report's notes,
`DIFFERENCES`):

- the API server: vLLM bench's requests go through ``vllm serve``'s API process (HTTP,
  tokenisation, detokenisation, streaming), the engine core in a process of its own (V1,
  ``api_overlap`` 1 in ``sim/costs/engine_steps.toml``), so the API's work
  (``api_per_request_s``, ``api_per_token_s``, ``served = true`` runs only) never entered the
  engine's steps; the fit has no API term, and none is added or removed for the offline run
  (``served = false``).  Its per-request share reaches the served TTFT and e2e latency only;
- arrivals: the served runs are Poisson at 0.5-1 req/s (a few requests in flight), PSD is
  offline with 2m in flight: the fit's per-sequence cost is extrapolated to larger batches;
- the drafter: in vLLM's SD it is vLLM's, sharing the target's core and process, in the
  server's dtype; in PSD it is psdlab's runner (``runtime.vllm_ext.psd_drafter``) on its own
  core in the dtype its directory asks for (the shipped drafter: bfloat16) -- the probe's
  drafter exactly -- so the fit's drafter cost is rescaled by the probe's solo drafting over
  the fit's at the probe's shapes (`drafter_scale`); the probe's contention says what sharing
  the CPU still costs; its drafts cross a process boundary, whose host cost the served
  calibration cannot see (no SD-sep run: the probe's host saving against SD-sep's driver has
  nothing to be subtracted from, so PSD's controller overhead is the fitted step's own);
- prompts: the bench client sends the raw prompt text, ``psdlab run`` wraps it in the chat
  template where the tokenizer has one: the prediction uses the PSD run's own prompt lengths.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from psdlab.validation.vllm_check.check_results import (PSD_FIGURES, HeldOutTally,
                                                        PsdJudgement, PsdRow, PsdRunRecord,
                                                        noise)

if TYPE_CHECKING:
    from psdlab.analysis.contention import Contention, CorunProbe
    from psdlab.analysis.trace import Trace
    from psdlab.validation.serving_results.calibration import BenchFit

#: what differs between the served calibration and an offline PSD run (module docstring)
DIFFERENCES = (
    "PSD inside vLLM runs offline (all requests at t = 0, 2m in flight; the plugin serves "
    "no HTTP): served = false, no API-server term -- the served runs' API server ran in its "
    "own process (vLLM V1, api_overlap 1), so api_per_request_s / api_per_token_s never "
    "entered the fitted engine step and nothing is removed from it; their per-request share "
    "reached the served TTFT and e2e only",
    "the served calibration ran at 0.5-1 req/s (few requests in flight); the offline PSD run "
    "holds 2m: the fit's per-sequence cost is extrapolated to that batch",
    "the drafter: in vLLM's SD (the calibration) vLLM's own, on the target's core in the "
    "server's dtype; in PSD psdlab's runner on its own core in the dtype its directory asks "
    "for: its cost is the fit's times the probe's solo drafting over the fit's at the probe's "
    "shapes (drafter_scale), and the probe's contention prices the shared CPU; PSD's "
    "controller overhead is the fitted step's own (no SD-sep run to take the probe's host "
    "saving off)",
    "the prediction reads the PSD run's workload only (arrivals, prompt and output lengths: "
    "psdlab run wraps the prompts in the chat template, the bench client does not); none of "
    "its timings",
)
#: why a PSD row can be missing
NOT_MEASURED = ("PSD inside vLLM: not measured in this run (no psd_runs in its report: "
                "measured before check-vllm ran PSD, or with --psd-ks none)")


def psd_config_name(k: int, batch: int) -> str:
    """A PSD configuration's name: ``psd-k4-m4`` (offline, so no rate)."""
    return f"psd-k{k}-m{batch}"


def psd_ks(calibrated_k: int, ks: Sequence[int]) -> tuple[int, int]:
    """The PSD draft lengths judged by default: the calibrated k and one other -- the first
    other k of ``ks``, else k - 2 (k + 2 where that is below 1)."""
    other = next((k for k in ks if k != calibrated_k), None)
    if other is None:
        other = calibrated_k - 2 if calibrated_k > 2 else calibrated_k + 2
    return calibrated_k, other


def measured_figures(trace: Trace) -> tuple[dict[str, float | None], float | None]:
    """A PSD trace's `PSD_FIGURES` (as vLLM bench computes them: `bench_result_from_trace`)
    and its acceptance length."""
    from psdlab.analysis.formats.vllm_bench_write import bench_result_from_trace
    doc = bench_result_from_trace(trace, detailed=False)
    return ({m: _num(doc.get(m)) for m in PSD_FIGURES},
            _num(doc.get("spec_decode_acceptance_length")))


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _affine_time(cost: Mapping[str, Any], seqs: float, tokens: float, context: float) -> float:
    return (float(cost.get("base", 0.0)) + float(cost.get("per_seq", 0.0)) * seqs
            + float(cost.get("per_token", 0.0)) * tokens
            + float(cost.get("per_context", 0.0)) * context)


def solo_step(fit: BenchFit, m: int, k: int, mean_context: float) -> tuple[float, float]:
    """(draft, verify) solo times of one full PSD half-step under the fit's affine costs: k
    one-token drafter passes and one (k + 1)-token verification over m sequences."""
    if fit.drafter_cost is None:
        raise ValueError("calibration: PSD needs a drafter cost (no speculative run in it)")
    ctx = m * max(1.0, mean_context)
    draft = sum(_affine_time(fit.drafter_cost, m, m, ctx + j * m) for j in range(k))
    verify = _affine_time(fit.target_cost, m, m * (k + 1), ctx)
    return draft, verify


def drafter_scale(fit: BenchFit, probe: CorunProbe) -> float:
    """PSD's drafter pass against the calibration's: the probe's solo drafting phase (psdlab's
    runner on the drafter's own core, in the dtype PSD's drafter runs: what PSD inside vLLM
    drafts with) over the fit's drafter cost at the same shape (k one-token passes over
    ``seqs`` sequences at ``context`` tokens each), the median over the probe's shapes.  The
    served SD drafter ran inside vLLM on the target's core in the server's dtype; this is
    measured without PSD."""
    if fit.drafter_cost is None:
        raise ValueError("calibration: PSD needs a drafter cost (no speculative run in it)")
    ratios = []
    for shape in probe.shapes:
        m, ctx = shape.seqs, shape.seqs * shape.context
        fitted = sum(_affine_time(fit.drafter_cost, m, m, ctx + j * m) for j in range(shape.k))
        if fitted > 0:
            ratios.append(statistics.median(shape.solo_draft_s) / fitted)
    return statistics.median(ratios) if ratios else 1.0


def _scaled(cost: Mapping[str, Any], scale: float) -> dict[str, Any]:
    from psdlab.sim.costs.affine import AFFINE_TERMS
    return {**cost, **{t: scale * float(cost.get(t, 0.0)) for t in AFFINE_TERMS}}


def psd_sim_config(fit: BenchFit, rows: Sequence[tuple[float, int, int, str]], k: int, m: int,
                   scales: tuple[float, float], seed: int = 0) -> Any:
    """The simulator config of PSD at ``k`` and ``m`` serving the workload ``rows`` (replay
    rows) with the fit's models, decode costs times ``scales`` (target, drafter)."""
    from psdlab.sim.sim_config import ServerConfig, SimConfig, SimModel, TraceConfig
    if fit.drafter_cost is None or fit.acceptance is None:
        raise ValueError("calibration: PSD needs a drafter cost and acceptance, which this "
                         "calibration has not (no speculative run in its inputs)")
    server = ServerConfig(mode="psd", k=k, m=m, policy="rebalance", first_token="step",
                          cap_proposals=bool(fit.server.get("cap_proposals", False)))
    return SimConfig(
        server=server,
        target=SimModel("target", "sim:target", _scaled(fit.target_cost, scales[0])),
        drafter=SimModel("drafter", "sim:drafter", _scaled(fit.drafter_cost, scales[1])),
        acceptance=dict(fit.acceptance), workload={"name": "replay", "rows": list(rows)},
        requests=len(rows), seed=seed,
        jitter={"dist": "gamma", "cv": fit.jitter_cv} if fit.jitter_cv > 0 else None,
        trace=TraceConfig(path=None, level="step"))


def predict_psd(fit: BenchFit, trace: Trace, contention: Contention, seed: int = 0,
                draft_scale: float = 1.0) -> dict[str, float | None]:
    """`PSD_FIGURES` of the PSD run ``trace`` predicted from the served calibration ``fit``
    and the probe's ``contention``, the fit's drafter cost times ``draft_scale``
    (`drafter_scale`) (module docstring); only the trace's workload is read."""
    fit = replace(fit, drafter_cost=None if fit.drafter_cost is None
                  else _scaled(fit.drafter_cost, draft_scale))
    from psdlab.analysis.formats.vllm_bench_write import bench_result_from_trace
    from psdlab.sim.simulation import simulate
    from psdlab.validation.replay_model import contention_scales
    from psdlab.validation.replay_scales import overlap_share

    if not trace.requests:
        raise ValueError("trace: the PSD run has no request records to predict")
    # offline: every request at t = 0, in the order psdlab run submits them (the prompt file's)
    reqs = sorted(trace.requests, key=_prompt_order)
    rows = tuple((0.0, max(1, r.prompt_len), max(1, r.output_len), str(r.id)) for r in reqs)
    k, m = int(trace.run.k), int(trace.run.m)
    mean_ctx = statistics.fmean(p + o / 2 for _, p, o, _ in rows)
    draft, verify = solo_step(fit, m, k, mean_ctx)
    full = contention_scales(draft, verify, contention.drafter, contention.target)
    first = simulate(psd_sim_config(fit, rows, k, m, full, seed))
    share = overlap_share(first.trace)                # (verify, draft) overlapped shares
    scales = (1.0 + share[0] * (full[0] - 1.0), 1.0 + share[1] * (full[1] - 1.0))
    sim = simulate(psd_sim_config(fit, rows, k, m, scales, seed))
    doc = bench_result_from_trace(sim.trace, detailed=False)
    return {f: _num(doc.get(f)) for f in PSD_FIGURES}


def _prompt_order(r: Any) -> tuple[int, int, str]:
    """A request's place in the prompt file: numeric ids by number, others after, by name."""
    key = str(r.id)
    return (0, int(key), "") if key.isdigit() else (1, 0, key)


def _err(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or not meas:
        return None
    return pred / meas - 1.0


def judge_psd(records: Sequence[PsdRunRecord], probe_path: str | None, fit: BenchFit,
              seed: int = 0) -> PsdJudgement:
    """PSD's rows: each configuration's repeats measured, predicted from ``fit`` and the probe
    at ``probe_path``, compared; `NOT_MEASURED` when there are no records."""
    from psdlab.analysis.contention import fit_corun
    from psdlab.analysis.trace_read import read_trace
    from psdlab.validation.corun_file import read_corun_file

    if not records:
        return PsdJudgement(measured=False, why=NOT_MEASURED, probe=None, contention=None,
                            drafter_scale=None, rows=(), held_out=HeldOutTally.of([]), notes=())
    if probe_path is None:
        raise ValueError("corun_probe: the PSD runs have no co-run probe's record to be "
                         "predicted from")
    probe = read_corun_file(probe_path)
    contention = fit_corun(probe)
    scale = drafter_scale(fit, probe)
    configs: dict[str, list[PsdRunRecord]] = {}
    for r in records:
        configs.setdefault(r.config, []).append(r)
    rows = []
    for reps in configs.values():
        traces = [read_trace(r.trace) for r in reps]
        each = [measured_figures(t) for t in traces]
        figs = tuple(f for f, _ in each)
        meas = {m: _mean([f[m] for f in figs]) for m in PSD_FIGURES}
        try:
            pred: dict[str, float | None] = predict_psd(fit, traces[0], contention, seed,
                                                        scale)
            why = None
        except ValueError as exc:
            pred, why = {m: None for m in PSD_FIGURES}, str(exc).splitlines()[0]
        rows.append(PsdRow(
            config=reps[0].config, k=reps[0].k, batch=reps[0].batch, repeats=len(reps),
            measured=meas, predicted=pred, not_predicted=why,
            error={m: _err(pred[m], meas[m]) for m in PSD_FIGURES},
            noise={m: noise([f[m] for f in figs]) for m in PSD_FIGURES},
            measured_repeats=figs, acceptance_length=_mean([a for _, a in each]),
            traces=tuple(r.trace for r in reps)))
    judged = [(e, r.noise[m]) for r in rows for m, e in r.error.items() if e is not None]
    return PsdJudgement(measured=True, why=None, probe=probe_path,
                        contention=contention.to_dict(), drafter_scale=scale, rows=tuple(rows),
                        held_out=HeldOutTally.of(judged), notes=DIFFERENCES)


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None
