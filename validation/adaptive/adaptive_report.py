"""The figure and the text of ``psdlab bench-adaptive`` (``validation.adaptive.bench_adaptive``)."""
from __future__ import annotations

from psdlab.validation.adaptive.adaptive_results import AdaptiveBenchResult


def write_adaptive_figure(result: AdaptiveBenchResult, path: str) -> None:
    """Throughput against load, one line per configuration: measured (solid) and the
    simulator's prediction made before the runs (dashed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result.measured.rows if not r.load.endswith("(repeat)")]
    loads = [r.load for r in rows]
    pred = {r.load: r for r in result.prediction.rows}
    labels = list(rows[0].configs)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    x = list(range(len(loads)))
    for i, lab in enumerate(labels):
        color = f"C{i}"
        ax.plot(x, [r.configs[lab].tok_s for r in rows], "o-", color=color,
                lw=2.2 if lab == "adaptive" else 1.5, label=f"{lab} (measured)")
        ys: list[float] = []
        for r in rows:
            key = "offline" if r.rate_req_s is None else f"{r.rate_req_s:g}"
            p = pred.get(key)
            sim = p.config(lab) if p else None
            ys.append(float("nan") if sim is None or sim.tok_s is None else sim.tok_s)
        if any(y == y for y in ys):
            ax.plot(x, ys, "--", color=color, alpha=0.6, lw=1.0)
    names = [("offline" if r.rate_req_s is None else f"{r.load}\n{r.rate_req_s:.2f} req/s")
             for r in rows]
    ax.set_xticks(x, names)
    ax.set_ylabel("throughput (output tokens/s)")
    ax.set_title(f"{result.drafter} drafter, k={result.plan.k}, "
                 f"m={result.plan.m}: measured (solid), simulated before the runs (dashed)",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def format_text(result: AdaptiveBenchResult) -> str:
    meas, plan = result.measured, result.plan
    labels = list(meas.rows[0].configs)
    lines = [f"bench-adaptive: drafter {result.drafter}, k {plan.k}, "
             f"m {plan.m}, {plan.requests} requests x "
             f"{plan.max_new_tokens} tokens; {result.wall_s:.0f} s; load "
             f"{result.uptime_before[0]:.1f} -> {result.uptime_after[0]:.1f}",
             "per load: tok/s (TPOT p99 ms); winner measured / predicted; adaptive / best"]
    for r in meas.rows:
        cells = "  ".join(f"{lab} {r.configs[lab].tok_s:.2f} "
                          f"({1e3 * (r.configs[lab].tpot_p99 or 0):.0f})" for lab in labels)
        lines.append(f"  {r.load:>16s}: {cells}  | {r.winner_measured} / "
                     f"{r.winner_predicted}  | {r.adaptive_vs_best:.3f}")
    norm = ", ".join(f"{k} {v:.3f}" for k, v in meas.mean_normalised_tok_s.items())
    lines.append(f"mean over loads of tok/s / best at that load: {norm}")
    lines.append(f"goal adaptive >= 0.97 x best at every load: {meas.goal_097_every_load} "
                 f"(min {meas.adaptive_min_vs_best:.3f}); ahead of every fixed overall: "
                 f"{meas.adaptive_ahead_of_every_fixed_overall}; winners predicted right: "
                 f"{meas.winners_predicted_right}/{meas.loads}")
    if meas.pooled_adaptive_min_vs_best is not None:
        lines.append(f"two passes pooled: adaptive / best >= "
                     f"{meas.pooled_adaptive_min_vs_best:.3f} at every load; largest "
                     f"pass-to-pass spread of one configuration "
                     f"{100 * (meas.max_pass_spread or 0):.0f} %")
    for sp in result.prediction.switch_points:
        lo, hi = sp.between_req_s
        lines.append(f"predicted switch {sp.from_choice} -> {sp.to_choice} between {lo:.3g} and "
                     f"{hi:.3g} req/s")
    lines.append("files: " + ", ".join(result.files))
    return "\n".join(lines)
