"""`psdlab theory`'s report: the exact PSD/SD ratio for the exponential frontier over alpha*V,
the paper's bound next to it, and a plain-words verdict on the "at least 37%" claim and
Theorem 1 (a JSON-ready dict and its text)."""
from __future__ import annotations

import json
import math
from typing import Any


def parse_grid(text: str) -> list[float]:
    """'0.1,1,5' -> [0.1, 1.0, 5.0]; each value must be a finite number > 0."""
    from psdlab.analysis.checks import check_positive

    values = []
    for item in str(text).split(","):
        try:
            value = float(item.strip())
        except ValueError:
            raise ValueError(f"--alpha-v: expected comma-separated numbers > 0, got {item!r}") \
                from None
        values.append(check_positive("--alpha-v", value))
    return values


def theory_report(xs: list[float], threshold: float) -> dict[str, Any]:
    """The report as a JSON-ready dict (keys as documented in the command's help)."""
    import numpy as np

    from psdlab.analysis.theory import (THEOREM1_RATIO, exact_ratio, paper_ratio_bound, peak,
                                        region, sd_opt_draft, theorem1_check, theorem1_threshold)
    from psdlab.analysis.theory.paper import X_MAX, X_MIN

    x = np.asarray(xs, dtype=float)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        ratio, bound, s_opt = exact_ratio(x), paper_ratio_bound(x), sd_opt_draft(x)
    x0 = theorem1_threshold()
    nulls: list[str] = []

    def finite(value: float, key: str, xi: float) -> float | None:
        """``value``, or None (JSON null) with the reason in ``nulls`` where it overflowed."""
        if math.isfinite(value):
            return float(value)
        nulls.append(f"{key} at alpha_v={xi:g}: not finite in double precision ({value}), "
                     f"written as null")
        return None

    rows = []
    for xi, r, b, s in zip(x, ratio, bound, s_opt):
        b_ok = finite(float(b), "paper_bound", xi)
        rows.append({"alpha_v": float(xi), "ratio": finite(float(r), "ratio", xi),
                     "saving": finite(float(1 - 1 / r), "saving", xi),
                     "t_sd_opt": finite(float(s), "t_sd_opt", xi), "paper_bound": b_ok,
                     "paper_saving_bound": None if b_ok is None else float(1 - 1 / b),
                     "theorem1_claim": THEOREM1_RATIO if xi >= x0 else None})
    pk, check = peak(), theorem1_check()
    extra = {"nulls": nulls} if nulls else {}
    return {**extra,
        "threshold": threshold, "scan_range": [X_MIN, X_MAX],
        "units": {"t_sd_opt": "alpha*t (drafting time in units of 1/alpha)",
                  "paper_bound": "lower bound on T_SD/T_PSD from Lemma 1 and Lemma 2"},
        "rows": rows,
        "peak": {"alpha_v": pk.alpha_v, "saving": pk.saving, "ratio": pk.ratio},
        "region": region(threshold, "exact"),
        "paper_region": region(threshold, "paper"),
        "theorem1_holds_as_stated": check.holds_as_stated,
        "theorem1": {"threshold_alpha_v": x0, "claimed_ratio": THEOREM1_RATIO,
                     "holds_on": check.holds_on, "fails_above": check.fails_above,
                     "ratio_at_threshold": check.ratio_at_threshold,
                     "paper_bound_at_threshold": check.paper_bound_at_threshold,
                     "ratio_at_1e6": check.ratio_at_x_max, "proof_step": check.proof_step},
    }


def _intervals(iv: list[list[float]]) -> str:
    return " and ".join(f"[{lo:.4g}, {hi:.4g}]" for lo, hi in iv) if iv else "none (empty)"


def theory_text(rep: dict[str, Any]) -> str:
    """The report as a table and a plain-words verdict."""
    head = f"{'alpha*V':>10}{'T_SD/T_PSD':>12}{'saving':>9}{'alpha*t_SD':>12}{'paper bound':>13}"
    def cell(value: float | None, width: int, fmt: str) -> str:
        return f"{'-' if value is None else format(value, fmt):>{width}}"

    lines = [head] + [f"{r['alpha_v']:>10.4g}{cell(r['ratio'], 12, '.5f')}"
                      f"{cell(r['saving'], 9, '.2%')}{cell(r['t_sd_opt'], 12, '.5g')}"
                      f"{cell(r['paper_bound'], 13, '.5f')}" for r in rep["rows"]]
    th, t1, pk = rep["threshold"], rep["theorem1"], rep["peak"]
    lo, hi = rep["scan_range"]
    lines += [
        "",
        "alpha*t_SD: SD-optimal drafting time per step in units of 1/alpha (PSD's is t = V); "
        "paper bound: Lemma 1's lower bound on T_SD over Lemma 2's T_PSD.",
        f"Exact saving >= {th:.4g} for alpha*V in {_intervals(rep['region'])} "
        f"(scanned {lo:g}..{hi:g}).",
        f"The paper's bound (Lemma 1 / Lemma 2) gives saving >= {th:.4g} only for alpha*V in "
        f"{_intervals(rep['paper_region'])}.",
        f"Peak: saving {pk['saving']:.1%} (T_SD = {pk['ratio']:.4g} T_PSD) at alpha*V = "
        f"{pk['alpha_v']:.5g}, the root of x = ln(1 + 2x), where the SD-optimal t equals V.",
    ]
    if rep["theorem1_holds_as_stated"]:
        lines.append(f"Theorem 1 holds as stated on alpha*V >= {t1['threshold_alpha_v']:.4f}.")
    else:
        lines.append(
            f"Theorem 1 (alpha*V >= {t1['threshold_alpha_v']:.4f} => T_SD > 1.59 T_PSD) is FALSE "
            f"as stated: it holds only for alpha*V in {_intervals(t1['holds_on'])}; above "
            f"{t1['fails_above']:.4g} the exact ratio drops below 1.59 and tends to 1 "
            f"({t1['ratio_at_1e6']:.6f} at alpha*V = 1e6). Proof step: {t1['proof_step']}.")
    return "\n".join(lines)


def theory_command(alpha_v: str, threshold: float, as_json: bool = False) -> str:
    """`psdlab theory`: the report over the comma-separated ``alpha_v`` grid, as text or one
    JSON object."""
    from psdlab.analysis.theory._checks import threshold_value

    checked = threshold_value(threshold, "--threshold")
    rep = theory_report(parse_grid(alpha_v), checked)
    return json.dumps(rep, allow_nan=False) if as_json else theory_text(rep)
