"""`psdlab bench-gpu`'s markdown summary (`validation.gpu.bench_gpu` writes the JSON beside it)."""
from __future__ import annotations

from typing import Any


def _f(x: Any, spec: str = ".2f") -> str:
    return "n/a" if x is None else format(x, spec)


def _cell(entry: Any) -> str:
    if isinstance(entry, str):
        return f"({entry})"
    if not isinstance(entry, dict) or "median_ms" not in entry:
        return "n/a" if not isinstance(entry, dict) else f"({entry.get('error', 'n/a')})"
    ratio = f", {entry['x_floor']:.1f}x" if entry.get("x_floor") else ""
    return f"{entry['median_ms']:.3f} / {entry['max_ms']:.3f}{ratio}"


def gpu_markdown(summary: dict[str, Any]) -> str:
    mach = summary["machine"]
    cfg = summary["config"]
    lines = [f"# psdlab bench-gpu ({'dry run on CPU' if summary['dry_run'] else 'GPU'})", "",
             f"{', '.join(mach.get('gpus') or [mach.get('cpu', 'cpu')])}; torch "
             f"{mach.get('torch', '')} CUDA {mach.get('cuda', '')}; commit "
             f"{mach.get('commit', '')}; {mach.get('date', '')}; {summary.get('wall_s', 0):.0f} s",
             f"models: {summary['models']['target']} / {summary['models']['drafter']}, "
             f"{cfg['dtype']}, k {cfg['k']}, m {cfg['batches']}, {cfg['num_prompts']} requests "
             f"x {cfg['max_new_tokens']} tokens after {cfg['prompt_len']}, controlled alpha "
             f"{cfg['controlled_alpha']}, passes {summary['passes']}", ""]
    for section in ("passes", "compiled"):
        p = summary["sections"].get(section)
        if p:
            lines += _pass_lines(p)
    for m, fig in summary["sections"].get("runs", {}).items():
        sim = fig.get("simulator", {}).get("summary", {})
        rule = fig["lossless_rule"]
        lines += [f"## Runs at m = {m} ({fig['layout']['name']})", "",
                  f"- t {_f(fig['t_ms'])} ms, V {_f(fig['v_ms'])} ms; PSD/SD-sep decode "
                  f"throughput {_f(fig['measured_gain'], '.3f')} (by round "
                  f"{', '.join(_f(g, '.3f') for g in fig.get('measured_gain_by_round', []))}); "
                  f"closed form (t + V) / max(t, V) {_f(fig['predicted_gain'], '.3f')}; with "
                  f"PSD's own step time {_f(fig.get('predicted_gain_contended'), '.3f')}",
                  f"- acceptance length SD-sep {_f(fig.get('sd_mean_acceptance_length'))}, "
                  f"PSD {_f(fig.get('psd_mean_acceptance_length'))}",
                  "- phase times (median / max ms, max/median): " + "; ".join(
                      f"{k} {v['median_ms']:.2f} / {v['max_ms']:.2f} "
                      f"({v['max_over_median']:.2f})" for k, v in fig["phase_spread"].items()),
                  f"- lossless rule (batch-invariant runs: {fig.get('batch_invariant')}): "
                  f"PSD == SD-sep {rule['psd_equals_sd_sep']}; divergences "
                  f"from AR {rule['divergences_total']} (accepted "
                  f"{rule['divergences_accepted']}); holds {rule['holds']}",
                  f"- simulator (calibrated on {', '.join(fig['simulator']['calibrated_on'])}; "
                  f"held out: {fig['simulator']['held_out']}): {_sim(sim)}", ""]
    inv = summary["sections"].get("batch_invariant")
    if inv:
        lines += [f"## Batch-invariant mode (m = {inv['m']})", "",
                  f"AR, SD-sep and PSD equal: {inv['equal']} (requests equal to AR: "
                  f"{inv['requests_equal_to_ar']} of {inv['requests']})", ""]
    if summary.get("skipped"):
        lines += ["Skipped: " + "; ".join(summary["skipped"]), ""]
    return "\n".join(lines) + "\n"


def _sim(rows: list[dict[str, Any]]) -> str:
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


def _pass_lines(p: dict[str, Any]) -> list[str]:
    labels = [k for k in next(iter(p["kinds"].values())) if k != "floor_ms"]
    lines = [f"## Passes at m = {p['m']}, context {p['context']} (median / max ms, x the floor: "
             f"weights + KV at {_f(p['memory_bw_gbs'], '.0f')} GB/s, {p['hardware']})", "",
             "| pass | floor ms | " + " | ".join(labels) + " |",
             "|---|---|" + "---|" * len(labels)]
    for kind, e in p["kinds"].items():
        lines.append(f"| {kind} | {_f(e['floor_ms'], '.3f')} | "
                     + " | ".join(_cell(e.get(lab)) for lab in labels) + " |")
    setups = {k.split("_setup:")[0] + " " + k.split(":", 1)[1]: v for k, v in p.items()
              if "_setup:" in k and v and v.get("static_shapes")}
    lines += ["", "static shapes made at start: " + ("; ".join(
        f"{k}: {v['static_shapes']} in {_f(v['static_setup_s'])} s" for k, v in setups.items())
        or "none")]
    gen = {r: p.get(f"{r}_hf_generate_ms_per_token") for r in ("target", "drafter")}
    if any(v is not None for v in gen.values()):
        lines.append("Hugging Face generate, ms per new token: " + ", ".join(
            f"{r} {_f(v, '.3f')}" for r, v in gen.items()))
    return lines + [""]
