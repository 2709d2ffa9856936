"""The words of `psdlab frontier`: the markdown summary and the short terminal report, from
the result of ``validation.frontier.run_frontier.run_frontier`` (`FrontierResult`; every figure
quoted comes from it)."""
from __future__ import annotations

from typing import Sequence

from psdlab.validation.frontier.frontier_results import FrontierResult, FrontierRow, RoundStats

MODEL_WORDS = {
    "paper.points": "paper's model at the measured points: (t+V)/(m k VSR), max(t,V)/(m k VSR); "
                    "one V (median), no bonus token, no overhead, no jitter",
    "paper.fit": "paper's model on the fitted 1-exp(-alpha t) at each drafter's t",
    "batch.points": "psdlab's batch-aware model at the measured points (psdlab's prediction): "
                    "(t+V+o)/T and (E[max(t,V)]+o)/T, T = emitted tokens per step (bonus "
                    "included), each drafter's own V at this k and m, per-step overhead o, "
                    "gamma jitter from the measured CVs, and the overlap slowdowns s_t, s_V "
                    "of drafting and verification running at once (contention), the median "
                    "over the other drafters' PSD runs (leave one out); its SD time "
                    "reproduces the measured SD time by construction",
    "batch.points_no_contention": "the same without the overlap slowdowns (s_t = s_V = 1)",
    "batch.fit": "batch-aware model with T = m (1 + k f_fit(t)), pooled o, CVs and slowdowns",
}


def _f(x: float | None, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{1e3 * x:.1f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f}%"


def _noise(stat: RoundStats) -> str:
    if stat.mean is None:
        return "n/a"
    se = f" ± {1e3 * stat.se:.1f}" if stat.se is not None else ""
    return f"{1e3 * stat.mean:.1f}{se}"


def _loads(load: Sequence[float] | None) -> str:
    return ", ".join(f"{x:.2f}" for x in load or ())


def _drafters_md(result: FrontierResult, rows: Sequence[FrontierRow]) -> list[str]:
    """The title, the run and machine, and the per-drafter table with its note."""
    plan, mach = result.plan, result.machine
    L = [
        "# The theory against a measured frontier",
        "",
        f"`psdlab frontier` (k = {plan.k}, m = {plan.m}, {result.workload.requests} "
        f"held-out requests x {plan.max_new_tokens} tokens, greedy, {plan.rounds} "
        f"round(s) per drafter{', QUICK smoke run' if plan.quick else ''}); "
        f"run took {result.wall_s:.0f} s.",
        f"Machine: {mach.cpu_model} ({', '.join(mach.flags)}), {mach.cores} cores, "
        f"load average {_loads(mach.load_average)} at start, "
        f"{_loads(result.load_average_end)} at the end; "
        f"{mach.date_utc}; commit {mach.git_commit[:12]}"
        f"{' (with uncommitted changes)' if mach.git_dirty else ''}.",
        "",
        "## Per drafter (SD-separate measurements; time per generated token in ms, mean ± SE "
        "over rounds)",
        "",
        "| drafter | layers | t (ms) | V (ms) | o (ms) | VSR | MAL | SD | PSD 2xm | PSD 2x(m/2) "
        "| AR m | AR 2m | paper SD / PSD | batch SD / PSD |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_name = {r.drafter: r for r in result.measured}
    for r in rows:
        m = by_name[r.drafter]
        env = " *" if r.on_envelope else ""
        L.append(
            f"| {r.drafter}{env} | {r.layers}{' (distilled)' if r.distilled else ''} "
            f"| {_f(r.t_ms, '.1f')} | {_f(r.V_ms, '.1f')} | {_f(r.overhead_ms, '.1f')} "
            f"| {_f(r.vsr)} | {_f(r.mean_acceptance_length, '.2f')} | {_noise(m.sd)} "
            f"| {_noise(m.psd)} | {_noise(m.psd_iso_c)} | {_noise(m.ar)} "
            f"| {_noise(m.ar_2m)} | {_f(r.paper_sd_ms_per_tok, '.1f')} / "
            f"{_f(r.paper_psd_ms_per_tok, '.1f')} | {_f(r.batch_sd_ms_per_tok, '.1f')} / "
            f"{_f(r.batch_psd_ms_per_tok, '.1f')} |")
    L += [
        "",
        "`*`: on the upper envelope (no other drafter is both as fast and as good). "
        "VSR = accepted / verified draft tokens (the paper's); MAL = 1 + accepted / "
        "verifications. t, V, o from the steady-state steps of the SD-separate runs.",
        "",
    ]
    return L


def _frontier_md(result: FrontierResult) -> list[str]:
    """The frontier: the envelope, the fitted curve, contention, the batch-aware model."""
    pred = result.prediction
    fit, th, cont = pred.fit, pred.theory_at_alpha_v, pred.continuous.batch_fit
    return [
        "## The frontier",
        "",
        f"- Envelope: {', '.join(pred.envelope)}.",
        f"- Fit of f(t) = 1 - exp(-alpha t) to the envelope: alpha = {fit.alpha_per_s:.3g} /s, "
        f"alpha*V = {fit.alpha_v:.3g} (V = median {_ms(pred.V_s)} ms; V ranges "
        f"{_ms(pred.V_range_s[0])}-{_ms(pred.V_range_s[1])} ms across drafters); "
        f"rms residual {fit.rms_envelope:.3f} on the envelope (R^2 "
        f"{_f(fit.r2_envelope)}), {fit.rms_all:.3f} on all points (R^2 "
        f"{_f(fit.r2_all)}).",
        f"- On the exact curve: T_SD/T_PSD = {th.exact_ratio:.3f} at alpha*V = "
        f"{fit.alpha_v:.3g} (saving {100 * th.saving:.1f}%; the peak is at alpha*V = "
        f"{th.peak_alpha_v:.4f}); the fitted curve asks for t*_SD = "
        f"{_ms(th.t_sd_opt_s)} ms and t*_PSD = V = {_ms(th.t_psd_opt_s)} ms.",
        f"- Contention (PSD's overlapped phases / SD-separate's, median over drafters): "
        f"drafting x{pred.pooled.slow_t:.2f}, verification x{pred.pooled.slow_V:.2f}"
        f" (per drafter in the CSV).",
        f"- Batch-aware model on the fitted curve, continuous t: t*_SD = "
        f"{_ms(cont.t_sd_s)} ms, t*_PSD = {_ms(cont.t_psd_s)} ms, ratio "
        f"{cont.ratio_sd_over_psd:.3f}.",
        "",
    ]


def _best_md(result: FrontierResult) -> list[str]:
    """The best drafter of each mode measured, and each model's picks and ratio."""
    jd = result.judgement
    meas = jd.measured
    L = [
        "## Best drafter of each mode and the SD/PSD ratio",
        "",
        f"Measured (steady-state decode, iso-batch): best SD **{meas.best_sd}** "
        f"({_ms(meas.sd_time_per_token_s)} ms/token), best PSD **{meas.best_psd}** "
        f"({_ms(meas.psd_time_per_token_s)} ms/token), ratio best-SD / best-PSD "
        f"**{meas.ratio_sd_over_psd:.3f}** (by round: "
        f"{', '.join(f'{x:.3f}' for x in meas.ratio_by_round)}; SE "
        f"{_f(meas.ratio_se)}).",
        "",
        "| model | best SD | best PSD | ratio | ratio error | SD pick excess | PSD pick excess |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, v in jd.models.items():
        L.append(f"| {key} | {v.best_sd} | {v.best_psd} | {v.ratio_sd_over_psd:.3f} "
                 f"| {_pct(v.ratio_error)} | {_pct(v.sd_pick_excess)} "
                 f"| {_pct(v.psd_pick_excess)} |")
    L += ["", "Models:"] + [f"- `{k}`: {w}." for k, w in MODEL_WORDS.items()]
    L += ["", "Pick excess: measured time per token of the model's pick over the measured "
          "best's (0 = it picked the measured best).", ""]
    return L


def _checks_md(result: FrontierResult) -> list[str]:
    """The checks: the predicted ratio and picks, the paper's claim, AR, losslessness."""
    jd = result.judgement
    meas = jd.measured
    ck, claim, ar = jd.checks, jd.paper_claim, jd.vs_ar
    b = jd.models[ck.model]
    L = [
        "## Checks",
        "",
        f"- Predicted ratio ({ck.model}) within 10% of the measured: "
        f"{'yes' if ck.ratio_within_10pct else 'NO'} ({b.ratio_sd_over_psd:.3f} vs "
        f"{meas.ratio_sd_over_psd:.3f}, {_pct(b.ratio_error)}).",
        f"- SD pick within 3%: {'yes' if ck.sd_pick_within_3pct else 'NO'} "
        f"({b.best_sd}, {_pct(b.sd_pick_excess)}); PSD pick within 3%: "
        f"{'yes' if ck.psd_pick_within_3pct else 'NO'} ({b.best_psd}, "
        f"{_pct(b.psd_pick_excess)}).",
        f"- The paper's claim ({claim.claim}): **{claim.verdict}**. Measured best SD "
        f"t = {_ms(claim.best_sd_t_s)} ms (VSR {claim.best_sd_vsr:.3f}); best PSD t = "
        f"{_ms(claim.best_psd_t_s)} ms (VSR {claim.best_psd_vsr:.3f}) = "
        f"{claim.best_psd_t_over_V:.2f} V.",
        f"- AR: {_ms(ar.ar_time_per_token_s)} ms/token at m, "
        f"{_ms(ar.ar_2m_time_per_token_s)} at 2m (measured with the first and the last "
        f"drafter's workers; CV between them {_f(ar.ar_cv_between_engines)}).",
    ]
    if ar.faster_than_ar:
        L += ["- Faster than AR at the same concurrency: " + "; ".join(
            f"{x.drafter} {x.mode} ({x.speedup_over_ar:.2f}x AR at {x.concurrency})"
            for x in ar.faster_than_ar) + "."]
    else:
        L += ["- No drafter makes SD or PSD faster than AR at the same concurrency."]
    lossless = all(r.lossless for r in result.measured)
    L += [f"- Outputs equal AR's token for token in every run: {'yes' if lossless else 'no'} "
          "(greedy; a difference is a near-tie flipped by a different batch shape).", ""]
    return L


def summary_markdown(result: FrontierResult, rows: Sequence[FrontierRow]) -> str:
    """summary.md of `psdlab frontier`: the drafters, the frontier, the best of each mode and
    the checks."""
    return "\n".join(_drafters_md(result, rows) + _frontier_md(result) + _best_md(result)
                     + _checks_md(result))


def terminal_summary(result: FrontierResult) -> str:
    """A few lines for the terminal."""
    jd, pred = result.judgement, result.prediction
    meas, b = jd.measured, jd.models["batch.points"]
    return "\n".join([
        f"frontier: {len(result.family)} drafters, k={pred.k} m={pred.m}, "
        f"{result.wall_s:.0f} s; alpha*V = {pred.fit.alpha_v:.3g} "
        f"(exact T_SD/T_PSD there {pred.theory_at_alpha_v.exact_ratio:.3f})",
        f"  measured: best SD {meas.best_sd}, best PSD {meas.best_psd}, ratio "
        f"{meas.ratio_sd_over_psd:.3f}",
        f"  predicted (batch-aware, points): best SD {b.best_sd}, best PSD {b.best_psd}, "
        f"ratio {b.ratio_sd_over_psd:.3f} ({_pct(b.ratio_error)})",
        f"  paper's claim (PSD favours a slower, better drafter): "
        f"{jd.paper_claim.verdict}",
        f"  files: {', '.join(result.files.paths())}",
    ])
