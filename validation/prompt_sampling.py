"""How far the held-out prompts' acceptance lies from the calibration prompts', and how far
chance alone would put it.

A prediction for prompts the calibration never served can only know the acceptance of the
*population* of prompts; the few prompts a run serves are a sample of it.  With n prompts a
side and a between-prompt standard deviation s of the accepted tokens per verification, the
two sides' means differ by chance with standard error s sqrt(1 / n_cal + 1 / n_held)
(s from the calibration side's prompts only).  ``acceptance_by_side`` measures, per side,
the accepted tokens per verification (over every verification of its SD and PSD runs, and
as the mean of its prompts' means), the fitted model's prediction of the held-out side's
value (its expected accepted count at each held-out verification's k and output position,
its prompt's style level), and that standard error; the ratio of tokens emitted per
verification, (1 + held-out) / (1 + calibration), is about the throughput shift it makes
in decode-bound runs, and the standard error over 1 + the calibration mean is about the
relative standard error it puts on every held-out throughput and TPOT (one shift common to
all held-out runs).

Those pooled figures mix k: the calibration runs serve k = 2 and 4, the held-out runs 3 and
4, and accepted tokens per verification grow with k.  ``matched_k`` compares like with like:
only the verifications that proposed the full k of the largest k both sides served, per
prompt, per style (the mean of the style's prompt means on each side, their difference, and
its chance standard error from the pooled spread of prompt means within a style on both
sides), and over the styles with equal weights.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.trace import Trace


def _per_prompt(traces: Sequence[Trace], pool: Mapping[str, str] | None = None
                ) -> tuple[dict[str, float], float, Any]:
    from psdlab.validation.acceptance_pool import acceptance_data
    data = acceptance_data(traces, pool)
    rp, _, _, ra = data.rows
    by: dict[str, list[float]] = defaultdict(list)
    for p, a in zip(rp, ra):
        by[str(p)].append(float(a))
    means = {p: float(np.mean(v)) for p, v in sorted(by.items())}
    pooled = float(ra.mean()) if ra.size else float("nan")
    return means, pooled, data


def acceptance_by_side(calibration: Sequence[Trace], held: Sequence[Trace],
                       spec: Mapping[str, Any] | None,
                       pool: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """Measured and predicted accepted tokens per verification by prompt side (module
    docstring; the calibration side with the acceptance pool's prompts walked at the
    calibration runs' k, ``validation.acceptance_pool``); None when a side has no
    verifications."""
    cal, cal_pooled, _ = _per_prompt(calibration, pool)
    ho, ho_pooled, ho_data = _per_prompt(held)
    if not cal or not ho:
        return None
    between = float(np.std(list(cal.values()), ddof=1)) if len(cal) > 1 else float("nan")
    within = within_style_sd(cal)
    # a model with style levels knows each style's level: only the spread within a style is
    # left to chance
    styled = bool(spec and spec.get("styles")) and within is not None
    s = within if styled else between
    se = s * math.sqrt(1 / len(cal) + 1 / len(ho)) if len(cal) > 1 and math.isfinite(s) else None
    pred = None
    if spec is not None:
        from psdlab.sim.acceptance import make_acceptance
        acc = make_acceptance(spec)
        rp, rk, rn, _ = ho_data.rows
        if getattr(acc, "kind", "") == "fitted":
            pred = float(np.mean([acc.expected_accepted(int(k), base=acc.base(p),
                                                        position=float(n))
                                  for p, k, n in zip(rp, rk, rn)]))
    cal_mean, ho_mean = float(np.mean(list(cal.values()))), float(np.mean(list(ho.values())))
    rel = None if se is None else se / (1.0 + cal_mean)
    return {"throughput_se_from_prompts": rel,
            "p_prompts_alone_break_5pct": None if not rel else
            float(math.erfc(0.05 / (rel * math.sqrt(2.0)))),
            "calibration": {"prompts": len(cal), "accepted_per_verification": cal_pooled,
                            "mean_of_prompts": cal_mean, "between_prompt_sd": between,
                            "within_style_sd": within,
                            "by_prompt": cal},
            "heldout": {"prompts": len(ho), "accepted_per_verification": ho_pooled,
                        "mean_of_prompts": ho_mean, "by_prompt": ho,
                        "predicted_accepted_per_verification": pred},
            "difference_of_prompt_means": ho_mean - cal_mean,
            "chance_se_of_difference": se,
            "chance_se_spread": "within_style" if styled else "between_prompt",
            "difference_over_se": None if not se else (ho_mean - cal_mean) / se,
            "emitted_ratio_heldout_over_calibration": (1 + ho_pooled) / (1 + cal_pooled),
            "matched_k": matched_k(calibration, held, pool)}


def _full_k_means(traces: Sequence[Trace], k: int, pool: Mapping[str, str] | None = None
                  ) -> dict[str, float]:
    """Per prompt, the mean accepted tokens of its verifications that proposed k in runs at k
    (and of the pool's prompts the runs did not serve, walked at k)."""
    from psdlab.validation.acceptance_pool import pool_verifications, served
    from psdlab.validation.acceptance_transfer import prompt_of
    by: dict[str, list[float]] = defaultdict(list)
    for tr in traces:
        if tr.run.k != k:
            continue
        for step in tr.steps:
            for v in step.verified:
                if v.proposed == k:
                    by[prompt_of(v.req)].append(float(v.accepted))
    for prompt, _, _, proposed, accepted in pool_verifications(pool or {}, [k], served(traces)):
        if proposed == k:
            by[prompt].append(float(accepted))
    return {p: float(np.mean(v)) for p, v in sorted(by.items())}


def matched_k(calibration: Sequence[Trace], held: Sequence[Trace],
              pool: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The sides compared at the largest k both served (module docstring); None without one."""
    from psdlab.sim.acceptance_fitted import style_of
    common = ({t.run.k for t in calibration if t.run.k} & {t.run.k for t in held if t.run.k})
    if not common:
        return None
    k = max(common)
    cal, ho = _full_k_means(calibration, k, pool), _full_k_means(held, k)
    by: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"c": [], "h": []})
    for p, v in cal.items():
        by[style_of(p)]["c"].append(v)
    for p, v in ho.items():
        by[style_of(p)]["h"].append(v)
    both = {s: d for s, d in sorted(by.items()) if d["c"] and d["h"]}
    if not both:
        return None
    sd = pooled_sd([x for d in both.values() for x in (d["c"], d["h"])])
    styles = {}
    for s_, d in both.items():
        c_m, h_m = float(np.mean(d["c"])), float(np.mean(d["h"]))
        se = None if sd is None else sd * math.sqrt(1 / len(d["c"]) + 1 / len(d["h"]))
        styles[s_] = {"calibration": c_m, "heldout": h_m, "prompts": [len(d["c"]), len(d["h"])],
                      "difference": h_m - c_m, "se": se,
                      "z": None if not se else (h_m - c_m) / se}
    c_all = float(np.mean([v["calibration"] for v in styles.values()]))
    h_all = float(np.mean([v["heldout"] for v in styles.values()]))
    ses = [v["se"] for v in styles.values()]
    se_all = (None if any(x is None for x in ses)
              else math.sqrt(sum(x * x for x in ses)) / len(ses))      # type: ignore[operator]
    return {"k": k, "styles": styles, "within_style_sd": sd, "calibration": c_all,
            "heldout": h_all, "difference": h_all - c_all, "se": se_all,
            "z": None if not se_all else (h_all - c_all) / se_all,
            "emitted_ratio_heldout_over_calibration": (1 + h_all) / (1 + c_all)}


def matched_md(m: Mapping[str, Any] | None) -> list[str]:
    """The report's like-for-like comparison of the sides."""
    if not m:
        return []
    from psdlab.validation.report import fmt_num
    out = [f"Like for like (only verifications that proposed k = {m['k']}, the largest k "
           f"both sides served; each style the mean of its prompts' means, styles weighted "
           f"equally; SE: chance alone, from the spread of prompt means within a style, "
           f"{fmt_num(m['within_style_sd'], '.3f')}): calibration {m['calibration']:.3f}, "
           f"held out {m['heldout']:.3f} accepted tokens per verification, "
           f"{100 * (m['emitted_ratio_heldout_over_calibration'] - 1):+.1f}% in tokens emitted "
           f"per verification"
           + ("" if m["z"] is None else f" ({m['z']:+.1f} SE)") + ".", "",
           "| style | calibration prompts | held-out prompts | calibration | held out | "
           "difference | SE | difference / SE |", "|---|---|---|---|---|---|---|---|"]
    for s, v in m["styles"].items():
        out.append(f"| {s} | {v['prompts'][0]} | {v['prompts'][1]} | {v['calibration']:.3f} | "
                   f"{v['heldout']:.3f} | {v['difference']:+.3f} | "
                   f"{fmt_num(v['se'], '.3f')} | {fmt_num(v['z'], '+.1f')} |")
    return out + [""]


def within_style_sd(means: Mapping[str, float]) -> float | None:
    """Pooled standard deviation of prompt means around their style's mean (style: the id's
    text before the first ``-``); None without more prompts than styles."""
    from psdlab.sim.acceptance_fitted import style_of
    by: dict[str, list[float]] = defaultdict(list)
    for p, v in means.items():
        by[style_of(p)].append(v)
    return pooled_sd(list(by.values()))


def pooled_sd(groups: Sequence[Sequence[float]]) -> float | None:
    """Pooled standard deviation of values around their group's mean; None without more
    values than groups."""
    dof = sum(len(g) - 1 for g in groups if len(g))
    if dof < 1:
        return None
    ss = sum(float(np.sum((np.asarray(g) - np.mean(g)) ** 2)) for g in groups if len(g))
    return math.sqrt(ss / dof)


def sampling_md(side: Mapping[str, Any] | None) -> list[str]:
    """The report's section on it."""
    if not side:
        return []
    c, h = side["calibration"], side["heldout"]
    pred = h.get("predicted_accepted_per_verification")
    se = side.get("chance_se_of_difference")
    z = side.get("difference_over_se")
    return ["## Prompt sampling: the held-out prompts against the calibration prompts", "",
            *matched_md(side.get("matched_k")),
            f"Over every verification (mixing the sides' k, so not like for like), accepted "
            f"draft tokens per verification (SD and PSD runs): calibration prompts "
            f"{c['accepted_per_verification']:.3f} ({c['prompts']} prompts, mean of prompts "
            f"{c['mean_of_prompts']:.3f}, between-prompt SD {c['between_prompt_sd']:.3f}"
            + ("" if c.get("within_style_sd") is None else
               f", within a style {c['within_style_sd']:.3f}") + "); "
            f"held-out prompts {h['accepted_per_verification']:.3f} ({h['prompts']} prompts, "
            f"mean of prompts {h['mean_of_prompts']:.3f})"
            + ("" if pred is None else f"; the fitted model predicts {pred:.3f} for them")
            + f". Tokens emitted per verification differ by "
            f"{100 * (side['emitted_ratio_heldout_over_calibration'] - 1):+.1f}% between the "
            f"sides. The difference of the prompt means is "
            f"{side['difference_of_prompt_means']:+.3f}"
            + ("" if se is None else f"; prompt sampling alone gives it a standard error of "
               f"{se:.3f} ({z:+.1f} SE; from the spread "
               + ("within a style, which the model's style levels do not know"
                  if side.get("chance_se_spread") == "within_style" else "between prompts")
               + ")") + "."
            + ("" if side.get("throughput_se_from_prompts") is None else
               f" In tokens per verification, hence about in decode throughput and TPOT, that "
               f"is a standard error of {100 * side['throughput_se_from_prompts']:.1f}% common "
               f"to every held-out run, so prompt sampling alone breaks a 5% bound with "
               f"probability {100 * side['p_prompts_alone_break_5pct']:.0f}% (not counted in "
               f"the run-to-run noise columns; the PSD/SD gain, whose runs share their "
               f"prompts, is nearly free of it)."), ""]
