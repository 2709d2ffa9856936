"""`psdlab bench-gpu`'s markdown summary (`validation.gpu.bench_gpu` writes the JSON beside it)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from psdlab.validation.gpu.gpu_results import GpuBenchSummary, RunFigure
from psdlab.validation.gpu.passes import PassCell, PassTable


def _f(x: Any, spec: str = ".2f") -> str:
    return "n/a" if x is None else format(x, spec)


def _cell(entry: PassCell) -> str:
    if isinstance(entry, str):
        return f"({entry})"
    if entry is None:
        return "n/a"
    ratio = f", {entry.x_floor:.1f}x" if entry.x_floor else ""
    return f"{entry.median_ms:.3f} / {entry.max_ms:.3f}{ratio}"


def gpu_markdown(summary: GpuBenchSummary) -> str:
    mach = summary.machine
    cfg = summary.config
    lines = [f"# psdlab bench-gpu ({'dry run on CPU' if summary.dry_run else 'GPU'})", "",
             f"{', '.join(mach.get('gpus') or [mach.get('cpu', 'cpu')])}; torch "
             f"{mach.get('torch', '')} CUDA {mach.get('cuda', '')}; commit "
             f"{mach.get('commit', '')}; {mach.get('date', '')}; {summary.wall_s:.0f} s",
             f"models: {summary.models['target']} / {summary.models['drafter']}, "
             f"{cfg.dtype}, k {cfg.k}, m {cfg.batches}, {cfg.num_prompts} requests "
             f"x {cfg.max_new_tokens} tokens after {cfg.prompt_len}, controlled alpha "
             f"{cfg.controlled_alpha}, passes {summary.passes}", ""]
    for table in (summary.sections.passes, summary.sections.compiled):
        if table is not None:
            lines += _pass_lines(table)
    for m, fig in (summary.sections.runs or {}).items():
        lines += _run_lines(m, fig)
    inv = summary.sections.batch_invariant
    if inv is not None:
        lines += [f"## Batch-invariant mode (m = {inv.m})", "",
                  f"AR, SD-sep and PSD equal: {inv.equal} (requests equal to AR: "
                  f"{dict(inv.requests_equal_to_ar)} of {inv.requests})", ""]
    if summary.skipped:
        lines += ["Skipped: " + "; ".join(summary.skipped), ""]
    return "\n".join(lines) + "\n"


def _run_lines(m: str, fig: RunFigure) -> list[str]:
    f, sim, rule = fig.figures, fig.run.simulator, fig.lossless_rule
    return [f"## Runs at m = {m} ({fig.run.layout.name})", "",
            f"- t {_f(f.t_ms)} ms, V {_f(f.v_ms)} ms; PSD/SD-sep decode "
            f"throughput {_f(f.measured_gain, '.3f')} (by round "
            f"{', '.join(_f(g, '.3f') for g in f.measured_gain_by_round)}); "
            f"closed form (t + V) / max(t, V) {_f(f.predicted_gain, '.3f')}; with "
            f"PSD's own step time {_f(f.predicted_gain_contended, '.3f')}",
            f"- acceptance length SD-sep {_f(f.sd_mean_acceptance_length)}, "
            f"PSD {_f(f.psd_mean_acceptance_length)}",
            "- phase times (median / max ms, max/median): " + "; ".join(
                f"{k} {v.median_ms:.2f} / {v.max_ms:.2f} "
                f"({v.max_over_median:.2f})" for k, v in fig.phase_spread.items()),
            f"- lossless rule (batch-invariant runs: {fig.batch_invariant}): "
            f"PSD == SD-sep {rule.psd_equals_sd_sep}; divergences "
            f"from AR {rule.divergences_total} (accepted "
            f"{rule.divergences_accepted}); holds {rule.holds}",
            f"- simulator (calibrated on {', '.join(sim.calibrated_on)} and PSD's contention "
            f"from {sim.psd_inputs}; PSD held out, predicted before it ran): "
            f"{_sim(sim.summary)}", ""]


def _sim(rows: Sequence[Mapping[str, Any]]) -> str:
    """validate's summary rows: each target's worst |error| against its bound (relative
    targets in %, gains in percentage points)."""
    if not rows:
        return "n/a"
    out = []
    for r in rows:
        pp = r.get("kind") == "pp"
        err = f"{r['max_abs_error']:.1f} pp" if pp else f"{100 * r['max_abs_error']:.1f}%"
        bound = ("" if r["bound"] is None else
                 f" (bound {r['bound']:.0f} pp)" if pp else f" (bound {r['bound']:.0%})")
        out.append(f"{r['target']} {err}{bound}")
    return "; ".join(out)


def _pass_lines(p: PassTable) -> list[str]:
    rows = [row for r in p.roles for row in r.kinds]
    labels = list(rows[0].cells)
    lines = [f"## Passes at m = {p.m}, context {p.context} (median / max ms, x the floor: "
             f"weights + KV at {_f(p.memory_bw_gbs, '.0f')} GB/s, {p.hardware})", "",
             "| pass | floor ms | " + " | ".join(labels) + " |",
             "|---|---|" + "---|" * len(labels)]
    for row in rows:
        lines.append(f"| {row.name} | {_f(row.floor_ms, '.3f')} | "
                     + " | ".join(_cell(row.cells.get(lab)) for lab in labels) + " |")
    setups = {f"{r.role} {lab}": v for r in p.roles for lab, v in r.setups.items()
              if v.static_shapes}
    lines += ["", "static shapes made at start: " + ("; ".join(
        f"{k}: {v.static_shapes} in {_f(v.static_setup_s)} s" for k, v in setups.items())
        or "none")]
    gen = {r: next((x.hf_generate_ms_per_token for x in p.roles if x.role == r and x.with_hf),
                   None) for r in ("target", "drafter")}
    if any(v is not None for v in gen.values()):
        lines.append("Hugging Face generate, ms per new token: " + ", ".join(
            f"{r} {_f(v, '.3f')}" for r, v in gen.items()))
    return lines + [""]
