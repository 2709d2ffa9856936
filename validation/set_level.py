"""How far a new prompt set may draft from the pool, and what that does to each prediction.

A prediction for new traffic learns its acceptance from the pool (``validation.demo_prompts``):
prompt sets written at other times by other writers.  Those sets differ beyond prompt
sampling (``validation.set_shift``: probed whole, ``fresh6`` accepted 14-16% less than every
set before it), so a new set carries a level of its own that no pool can know.  This module
measures that spread inside the demo, from the pool alone, and carries it into the prediction:

1. `pool_spread`: each pool split's acceptance level at ``k`` (its patterns walked as the
   demo's requests are long, bootstrap SE within style) and the between-set SD beyond
   sampling (``set_shift.between_set_sd``), relative to the pool's mean level.
2. `logit_step`: the shift of every style level of a ``fitted`` acceptance model that moves
   its expected accepted tokens over the pool's prompts by that relative SD, up or down
   (`mean_accepted`, bisection); `shifted` applies a shift to a spec.
3. `set_effects`: the held-out replays at +``SHIFT_SDS`` and -``SHIFT_SDS`` SDs (the same
   ``SET_SEEDS`` seeds) give each judged row's sensitivity s (error units: relative or pp)
   to a set one SD off.  One new set shifts
   every run the same way, so with z ~ N(0, 1) a row's error is z * s plus its measurement
   noise (SE from ``validation.noise``).  Per target: the largest |s|, P(the set shift alone
   breaks the bound on a run), and P(the set shift or the noise breaks it), integrated over z
   with the rows independent given z (the SD/PSD correlation of a pair left out).

A statement about the uncertainty of a prediction, not a correction of it: the point
prediction stays the pool's.  Pure numpy and scipy (no torch).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from scipy.stats import norm

from psdlab.validation.set_shift import WRITING_ORDER, SetLevel, between_set_sd, level

#: the draft length the pool's set levels are compared at (the calibration's largest k)
SET_K = 4
#: the set shift the held-out runs are replayed at, in between-set SDs each way: the
#: sensitivity is the difference over 2 * SHIFT_SDS, so a larger shift leaves less of the
#: replays' own noise in it (the response is close to linear over a few SDs)
SHIFT_SDS = 2.0
#: simulator seeds of those replays (the same for both).  One seed's replay of a run has a
#: TPOT SD of about 4.5% (``validation.demo.SEEDS``); the draws of the two shifted replays part
#: ways within a run, so with 2 seeds at +-1 SD the difference carried about 2% of TPOT of
#: that noise, as large as the effect (demo Z); 16 seeds at +-2 SDs leave about a sixth
SET_SEEDS = 16
#: the largest level shift (logit units) `logit_step` searches
_REACH = 5.0
#: z grid of `either_chance` (midpoint rule over N(0, 1))
_Z = np.linspace(-6.0, 6.0, 241)
_ZW = norm.pdf(_Z) / norm.pdf(_Z).sum()


@dataclass(frozen=True)
class PoolSpread:
    """The pool splits' levels at ``k`` and their spread beyond sampling."""
    k: int
    levels: tuple[SetLevel, ...]
    sd: float            # between-set SD of the levels (acceptance-rate units)
    mean: float          # mean of the levels
    relative: float      # sd / mean

    def to_dict(self) -> dict[str, Any]:
        return {"k": self.k, "sd": self.sd, "mean": self.mean, "relative": self.relative,
                "levels": [{"split": lv.split, "prompts": lv.prompts, "rate": lv.rate,
                            "se": lv.se} for lv in self.levels]}


def pool_spread(pool: Mapping[str, str], split_style: Mapping[str, tuple[str, str]],
                lengths: Mapping[int, int], k: int = SET_K) -> PoolSpread | None:
    """`PoolSpread` of the pool's patterns grouped by split (``split_style``: prompt id ->
    (split, style)); None with fewer than three splits (no spread to speak of)."""
    by_split: dict[str, list[tuple[str, str]]] = {}
    for pid, pattern in pool.items():
        if pid in split_style:
            split, style = split_style[pid]
            by_split.setdefault(split, []).append((pattern, style))
    order = sorted(by_split, key=lambda s: (WRITING_ORDER.index(s) if s in WRITING_ORDER
                                            else len(WRITING_ORDER), s))
    levels = []
    for split in order:
        patterns, styles = zip(*by_split[split])
        rate, se = level(patterns, styles, k, lengths)
        levels.append(SetLevel(split, len(patterns), rate, se))
    if len(levels) < 3:
        return None
    mean = float(np.mean([lv.rate for lv in levels]))
    sd = between_set_sd(levels)
    return PoolSpread(k, tuple(levels), sd, mean, sd / mean if mean > 0 else 0.0)


def shifted(spec: Mapping[str, Any], delta: float) -> dict[str, Any] | None:
    """A ``fitted`` spec with every style level and the default moved by ``delta`` (logit
    units); None for a spec of another kind (no level to move)."""
    if spec.get("name") != "fitted":
        return None
    out = dict(spec)
    out["styles"] = {s: float(v) + delta for s, v in (spec.get("styles") or {}).items()}
    out["default"] = float(spec["default"]) + delta
    return out


def mean_accepted(spec: Mapping[str, Any], keys: Sequence[str], k: int = SET_K) -> float:
    """E[accepted] of a k-token draft, averaged over requests ``keys`` (each at its style's
    level, the request level integrated out; ``FittedAcceptance.expected_accepted``): smooth
    in the levels, where a simulated rate is not."""
    from psdlab.sim.acceptance import make_acceptance
    model = make_acceptance(dict(spec))
    counts: dict[float, int] = {}
    for key in keys:
        b = model.base(key)
        counts[b] = counts.get(b, 0) + 1
    return sum(n * model.expected_accepted(k, base=b) for b, n in counts.items()) / len(keys)


def logit_step(spec: Mapping[str, Any], keys: Sequence[str], relative: float,
               k: int = SET_K) -> float | None:
    """The level shift that moves `mean_accepted` of requests ``keys`` by the factor
    1 + ``relative`` (bisection; monotone in the shift); None for a spec `shifted` cannot
    move or a factor out of reach."""
    if shifted(spec, 0.0) is None or not keys or relative <= -1.0:
        return None
    goal = (1.0 + relative) * mean_accepted(spec, keys, k)
    lo, hi = (-_REACH, 0.0) if relative < 0 else (0.0, _REACH)
    if not mean_accepted(shifted(spec, lo), keys, k) <= goal <= mean_accepted(
            shifted(spec, hi), keys, k):
        return None
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if mean_accepted(shifted(spec, mid), keys, k) < goal:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _keyed(validation: Any, only: set[str]) -> dict[tuple[str, str], Any]:
    return {(r.run, r.metric): r for r in validation.rows_of(only)
            if r.source == "sim" and r.error is not None}


def either_chance(s: Sequence[float], ses: Sequence[float], bound: float) -> float:
    """P(some |z s_i + e_i| > bound), z ~ N(0, 1) shared, e_i ~ N(0, ses_i^2) independent
    (an SE of 0: no noise)."""
    s_arr = np.asarray(s, float)[None, :]
    se = np.maximum(np.asarray(ses, float), 1e-12)[None, :]
    centre = _Z[:, None] * s_arr
    inside = norm.cdf((bound - centre) / se) - norm.cdf((-bound - centre) / se)
    return float(np.clip(1.0 - np.sum(_ZW * np.prod(inside, axis=1)), 0.0, 1.0))


def set_effects(base: Any, plus: Any, minus: Any, only: set[str], shift: float = 1.0
                ) -> list[dict[str, Any]]:
    """Per judged simulator target (``validation.validate.TARGETS``) over the runs ``only``:
    the rows' sensitivities to a set one SD off (from the replays at +``shift`` and -``shift``
    SDs), the largest |s|, P(set shift alone breaks), P(noise alone breaks) (the base
    summary's) and P(set shift or noise breaks)."""
    from psdlab.validation.validate import TARGETS
    rows, up, down = _keyed(base, only), _keyed(plus, only), _keyed(minus, only)
    noise = {s["target"]: s.get("noise_break_chance") for s in base.summary(only)}
    out = []
    for label, metric, source, bound, kind in TARGETS:
        keys = [key for key in rows if key[1] == metric and key in up and key in down]
        if source != "sim" or not keys:
            continue
        s = [(up[key].error - down[key].error) / (2.0 * shift) for key in keys]
        ses = [base.noise(rows[key]) or 0.0 for key in keys]
        worst = float(max(abs(x) for x in s))
        out.append({"target": label, "metric": metric, "bound": bound, "kind": kind,
                    "n": len(keys), "set_sd": worst,
                    "set_break_chance": (float(2 * norm.sf(bound / worst)) if worst > 0
                                         else 0.0),
                    "noise_break_chance": noise.get(label),
                    "either_break_chance": either_chance(s, ses, bound)})
    return out


def new_set_uncertainty(model_path: str, named: Sequence[tuple[str, Any]],
                        measured: Sequence[Any], base: Any, spec: Mapping[str, Any] | None,
                        pool: Mapping[str, str] | None, lengths: Mapping[int, int],
                        seeds: Sequence[int],
                        split_style: Mapping[str, tuple[str, str]] | None = None
                        ) -> dict[str, Any]:
    """The demo's step: the pool's spread, the chosen spec replayed on the held-out runs
    ``SHIFT_SDS`` between-set SDs better and worse (``seeds``), and `set_effects`;
    ``{"reason": ...}`` when it cannot be measured (too few pool splits, a spec with no level
    to move, a shift out of its reach).
    ``split_style``: prompt id -> (split, style), by default the shipped prompts'."""
    if split_style is None:
        from psdlab.runtime.prompts import load_prompts
        split_style = {p.id: (p.split, p.style) for p in load_prompts(split="all")}
    spread = pool_spread(pool, split_style, lengths) if pool else None
    if spread is None:
        return {"reason": "the acceptance pool spans fewer than three prompt splits"}
    out: dict[str, Any] = {"pool": spread.to_dict()}
    deltas = [logit_step(spec or {}, sorted(pool), r)
              for r in (SHIFT_SDS * spread.relative, -SHIFT_SDS * spread.relative)]
    if None in deltas:
        out["reason"] = (f"the chosen acceptance model ({(spec or {}).get('name')}) has no "
                         "level to move" if shifted(spec or {}, 0.0) is None else
                         f"the chosen acceptance model cannot move its acceptance by "
                         f"{100 * SHIFT_SDS * spread.relative:.0f}% either way")
        return out
    from psdlab.validation.validate import validate
    held = [(n, t) for (n, t), m in zip(named, measured) if m.spec.role == "validate"]
    groups = {m.spec.name: m.spec.config for m in measured}
    plus, minus = (validate(model_path, held, seeds=seeds, acceptance=shifted(spec, d),
                            groups=groups) for d in deltas)
    configs = {m.spec.config for m in measured if m.spec.role == "validate"}
    out.update(deltas=deltas, shift_sds=SHIFT_SDS, seeds=list(seeds),
               targets=set_effects(base, plus, minus, configs, SHIFT_SDS))
    return out


def _p(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.0f}%"


def set_md(info: Mapping[str, Any]) -> list[str]:
    """The report section of `new_set_uncertainty`'s result."""
    md = ["## New traffic: how far a new prompt set may draft from the pool", ""]
    pool = info.get("pool")
    if pool:
        lv = ", ".join(f"{x['split']} {x['rate']:.3f} +- {x['se']:.3f} ({x['prompts']})"
                       for x in pool["levels"])
        md += [f"The pool's splits at k = {pool['k']} (acceptance rate, bootstrap SE within "
               f"style, prompts): {lv}. Between-set SD beyond sampling: {pool['sd']:.4f}, "
               f"{100 * pool['relative']:.1f}% of their mean level {pool['mean']:.3f} "
               "(`validation.set_level`). The held-out split is a new set: its level is one "
               "more draw from that spread, which no pool can know.", ""]
    if "targets" not in info:
        return md + [f"Not carried into the prediction: {info.get('reason')}.", ""]
    from psdlab.validation.report import md_table
    from psdlab.validation.report_transfer import error_text
    body = [[t["target"], error_text(t["kind"], t["bound"]),
             f"{error_text(t['kind'], t['set_sd'])} ({t['n']})", _p(t["set_break_chance"]),
             _p(t["noise_break_chance"]), _p(t["either_break_chance"])]
            for t in info["targets"]]
    up, down = info["deltas"]
    n = info.get("shift_sds", 1.0)
    md += [f"Every style level of the chosen model moved by {up:+.3f} / {down:+.3f} (logit) "
           f"moves its expected accepted tokens over the pool's prompts by {n:g} between-set "
           f"SDs up / down; the held-out runs replayed {n:g} SDs better and worse "
           f"({len(info['seeds'])} seeds, the same for both) give each run's "
           "error per SD of set shift. One new set shifts every run the same way, so: "
           "the largest |error| per SD over the held-out runs, the chance that the set shift "
           "alone breaks the bound on a run, that noise alone does, and that either does "
           "(rows independent given the set's shift).", "",
           md_table(["target", "bound", "error per SD of set shift (n)",
                     "P(set shift breaks)", "P(noise breaks)", "P(either breaks)"], body), ""]
    return md
