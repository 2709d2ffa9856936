"""What ``psdlab calibrate`` does and prints: ``calibrate_command`` reads the inputs once
(``validation.calibrate_files.read_inputs``), calibrates on traces through the one model-file
path (``calibrate_files.calibrate_to_file``, the demo's too) or on serving-benchmark results
(``validation.serving_results.calibration``), and returns the lines to print: the coefficients with
95% intervals and held-out errors, the acceptance fits and the model chosen for new prompts, the
replay parameters, notes; warnings apart (stderr)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

#: the options that only serving-benchmark results take, by flag
BENCH_ONLY = ("--metrics-before", "--metrics-after", "--config", "--drafter-ratio",
              "--target-config", "--draft-config")
_UNITS = {"base": "ms", "per_seq": "ms/seq", "per_token": "ms/token",
          "per_context": "ms/ctx token"}


@dataclass(frozen=True)
class BenchOptions:
    """``psdlab calibrate``'s options for serving-benchmark results (``fit_from_bench``)."""
    metrics_before: str | None = None
    metrics_after: str | None = None
    config: str | None = None
    bootstrap: int = 20
    drafter_ratio: float | None = None
    target_config: str | None = None
    draft_config: str | None = None

    def __post_init__(self) -> None:
        from psdlab.analysis.checks import check_int
        check_int("--bootstrap", self.bootstrap, 2, 10_000)   # the documented range

    def given(self) -> bool:
        """Whether any option that only bench results take was given."""
        return bool(self.metrics_before or self.metrics_after or self.config
                    or self.drafter_ratio is not None or self.target_config
                    or self.draft_config)


@dataclass
class Printout:
    """What the command prints: ``out`` lines (stdout), ``err`` lines (stderr: warnings)."""
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)


def _ms(x: float | None) -> str:
    return "inf" if x is None or x == float("inf") else f"{1e3 * x:.4g}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def cost_lines(fits: Mapping[str, Any]) -> list[str]:
    """The table of the cost fits (``meta.fits``): estimates, 95% CIs, held-out errors."""
    from psdlab.validation.phase_model import FITS
    lines = [f"{'fit':<16}{'role':<9}{'term':<13}{'estimate':>12}  {'95% CI':<24}unit"]
    for name, fit in fits.items():
        for term in ("base", "per_seq", "per_token", "per_context"):
            lo, hi = fit["ci95"][term]
            est = _ms(fit["coef"][term]) if fit["identified"][term] else "-"
            ci = f"[{_ms(lo)}, {_ms(hi)}]" if fit["identified"][term] else "(not identified)"
            lines.append(f"{name:<16}{FITS[name][0]:<9}{term:<13}{est:>12}  {ci:<24}"
                         f"{_UNITS[term]}")
        lines.append(f"{'':<16}held-out error {_pct(fit['heldout_error'])} per phase, "
                     f"{_pct(fit['heldout_total_error'])} on the total "
                     f"({fit['n_heldout']} of {fit['n']} phases held out)")
    return lines


def acceptance_lines(acc: Mapping[str, Any] | None, selected: bool = False) -> list[str]:
    """The acceptance fits (``meta.acceptance_fit``); ``selected``: a model for new prompts
    was chosen too, and is the file's default instead of the match patterns."""
    if acc is None:
        return ["acceptance: no verified draft tokens in the traces"]
    lines = [f"acceptance ({acc['method']}, {acc['n_rows']} verified sequences, "
             f"{acc['n_requests']} requests): VSR {acc['vsr']:.3f}"]
    for j, (rate, (lo, hi)) in enumerate(zip(acc["rates"], acc["rates_ci95"]), start=1):
        lines.append(f"  position {j}: {rate:.3f} [{lo:.3f}, {hi:.3f}]")
    lo, hi = acc["mean_ci95"]
    beta = f"  per-request Beta: mean {acc['mean']:.3f} [{lo:.3f}, {hi:.3f}]"
    if acc["concentration"] is not None:
        clo, chi = acc["concentration_ci95"]
        beta += f", concentration {acc['concentration']:.3g} [{clo:.3g}, {chi:.3g}]"
    else:
        beta += ", concentration not identified"
    lines.append(beta)
    mp = acc.get("match_patterns")
    if mp:
        role = "the calibration's own requests" if selected else "default model"
        lines.append(f"  greedy match patterns ({role}): {mp['requests']} requests, "
                     f"{100 * mp['coverage']:.0f}% of their positions seen, "
                     f"{mp['conflicts']} disagreements between runs; unseen positions and "
                     f"requests use the per-position rates")
    return lines


def _num(x: float | None, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def transfer_lines(transfer: Mapping[str, Any] | None) -> list[str]:
    """The acceptance model chosen for new prompts (``meta.acceptance_transfer``)."""
    if not transfer:
        return []
    lines = [f"acceptance for new prompts (the file's default, 'fitted'): "
             f"{transfer['chosen']}, by {transfer['method']} ({len(transfer['prompts'])} "
             f"prompts; lowest CV CRPS of accepted tokens per verification)"]
    for row in transfer["scores"]:
        lines.append(f"  {'*' if row.get('chosen') else ' '} {row['candidate']}: CV CRPS "
                     f"{_num(row['cv_crps'], '.4f')}, NLL per token "
                     f"{_num(row['cv_nll_per_token'], '.4f')}, accepted-token error "
                     f"{_pct(row['cv_accept_error'])}")
    return lines


def replay_lines(rp: Mapping[str, Any] | None) -> list[str]:
    """The replay parameters (``meta.replay``)."""
    if not rp:
        return []
    return [f"replay: controller overhead per decode step {1e3 * rp['overhead_serial']:.2f} ms "
            f"serial, {1e3 * rp['overhead_overlapped']:.2f} ms overlapped; overlap "
            f"contention (share of solo speed lost while the other device runs) target "
            f"{rp['contention_target']:+.3f}, drafter {rp['contention_drafter']:+.3f}; step-time "
            f"jitter CV {rp['jitter_cv']:.3f}; proposals capped at the output budget: "
            f"{'yes' if rp.get('draft_cap') else 'no'}"]


def model_printout(model: Mapping[str, Any], n_traces: int, output: str,
                   as_json: bool) -> Printout:
    """What the command prints about a model file it wrote (the object written)."""
    if as_json:
        return Printout([json.dumps({"output": output, "n_traces": n_traces, **model},
                                    allow_nan=False)])
    meta = model["meta"]
    info = meta["calibration"]
    out = [f"calibrated on {n_traces} trace(s) (sources: {', '.join(info['sources'])}; "
           f"k: {', '.join(map(str, info['k']))}; m: {', '.join(map(str, info['m']))})"]
    transfer = meta.get("acceptance_transfer")
    out += (cost_lines(meta["fits"]) + acceptance_lines(meta["acceptance_fit"], bool(transfer))
            + transfer_lines(transfer) + replay_lines(meta.get("replay")))
    out += [f"note: {note}" for note in info["notes"]]
    out.append(f"wrote {output}")
    return Printout(out, [f"warning: {w}" for w in info["warnings"]])


def bench_printout(fit: Any, n_inputs: int, output: str, as_json: bool) -> Printout:
    """What the command prints about a fit to serving-benchmark results
    (``validation.serving_results.calibration.BenchFit``)."""
    from psdlab.validation.serving_results.calibration import describe
    if as_json:
        return Printout([describe(fit)])
    out = [f"calibrated on {n_inputs} bench result(s); intervals: {fit.interval_method}",
           f"{'coefficient':<22}{'estimate':>12}  {'95% interval':<26}unit"]
    for role, cost in (("target", fit.target_cost), ("drafter", fit.drafter_cost)):
        for term in ("base", "per_seq", "per_token", "per_context"):
            name = f"{role}.{term}"
            if cost is None or name not in fit.intervals:
                continue
            lo, hi = fit.intervals[name]
            out.append(f"{name:<22}{1e3 * float(cost[term]):>12.4g}  "
                       f"[{1e3 * lo:.4g}, {1e3 * hi:.4g}]".ljust(62) + _UNITS[term])
    for i, p in enumerate(fit.acceptance_per_position or (), start=1):
        lo, hi = fit.intervals.get(f"acceptance.p{i}", (p, p))
        out.append(f"acceptance position {i}: {p:.3f} [{lo:.3f}, {hi:.3f}] (share of drafts)")
    for path, err in fit.fit_error.items():
        out.append(f"fit on {path}: mean TTFT {err['mean_ttft_ms_fitted']:.4g} ms vs measured "
                   f"{err['mean_ttft_ms_measured']:.4g} ({100 * err['ttft_error']:+.1f}%), mean "
                   f"TPOT {err['mean_tpot_ms_fitted']:.4g} ms vs {err['mean_tpot_ms_measured']:.4g}"
                   f" ({100 * err['tpot_error']:+.1f}%)")
    if fit.drafter_to_target_ratio is not None:
        out.append(f"structural prior: drafter = {fit.drafter_to_target_ratio:.4g} x target")
    out += [f"note: {note}" for note in fit.notes]
    out.append(f"wrote {output}")
    return Printout(out)


def _calibrate_bench(paths: Sequence[str], output: str, seed: int, bench: BenchOptions,
                     as_json: bool) -> Printout:
    from psdlab.validation.serving_results.calibration import fit_from_bench
    fit = fit_from_bench(list(paths), metrics_before=bench.metrics_before,
                         metrics_after=bench.metrics_after, base_config=bench.config,
                         seed=seed, bootstrap=bench.bootstrap,
                         drafter_to_target_ratio=bench.drafter_ratio,
                         target_config=bench.target_config, draft_config=bench.draft_config)
    fit.save(output)
    return bench_printout(fit, len(paths), output, as_json)


def default_pool(first_trace: str) -> dict[str, str] | None:
    """The acceptance pool of the demo folder holding a trace (``REPORT_DIR/traces/X.jsonl``
    -> ``REPORT_DIR/acceptance_pool.json``, ``validation.demo.pool_probe.pool_for``), or None."""
    from psdlab.validation.acceptance.pool import POOL_FILE, read_pool
    folder = os.path.dirname(os.path.dirname(os.path.abspath(first_trace)))
    return read_pool(os.path.join(folder, POOL_FILE))


def calibrate_command(paths: Sequence[str], output: str, *, holdout: float = 0.2,
                      seed: int = 0, context_probe: str | None = None,
                      corun_probe: str | None = None,
                      acceptance_pool: str | None = None, select_acceptance: bool = True,
                      as_json: bool = False, bench: BenchOptions = BenchOptions()
                      ) -> Printout:
    """``psdlab calibrate``: every input read once; bench results to ``fit_from_bench``,
    traces through ``calibrate_files.calibrate_to_file`` (context probe and acceptance pool:
    the files given, else the context_probe.json beside the first trace and the pool of the
    demo folder holding it); what to print."""
    from psdlab.analysis.checks import check_range
    from psdlab.validation.acceptance.pool import read_pool
    from psdlab.validation.calibrate_files import calibrate_to_file, read_inputs
    from psdlab.validation.context_slopes import read_probe, read_probe_file
    from psdlab.validation.corun_file import read_corun, read_corun_file
    inputs = read_inputs(paths)
    if inputs.bench:
        return _calibrate_bench(paths, output, seed, bench, as_json)
    if bench.given():
        raise ValueError(f"{'/'.join(BENCH_ONLY)}: only with vLLM or SGLang bench results as "
                         f"input")
    holdout = check_range("--holdout", holdout, 0.0, 0.9)
    probe = (read_probe_file(context_probe) if context_probe else
             read_probe(os.path.dirname(os.path.abspath(paths[0]))))
    corun = (None if corun_probe == "none" else read_corun_file(corun_probe) if corun_probe
             else read_corun(os.path.dirname(os.path.abspath(paths[0]))))
    err: list[str] = []
    if corun is not None:
        from psdlab.validation.calibrate import non_psd
        left = non_psd(inputs.traces, list(paths))[2]
        if left:
            err.append(f"calibrate: {len(left)} trace(s) with overlapped (PSD) steps left out "
                       f"({', '.join(left)}): PSD is predicted from the co-run probe")
    pool = None
    if select_acceptance:
        if acceptance_pool and not os.path.isfile(acceptance_pool):
            raise FileNotFoundError(f"--acceptance-pool: no such file: {acceptance_pool}")
        pool = read_pool(acceptance_pool) if acceptance_pool else default_pool(paths[0])
    model = calibrate_to_file(output, inputs.traces, list(paths), holdout=holdout, seed=seed,
                              context_probe=probe, pool=pool,
                              select_acceptance=select_acceptance, corun=corun)
    out = model_printout(model, len(inputs.traces), output, as_json)
    out.err[:0] = err
    return out
