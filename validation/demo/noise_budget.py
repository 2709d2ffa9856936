"""What the judged bounds would need of the measurement: repeats for P(noise breaks) <= 10%.

The chance that noise alone breaks a bound (``validation.noise.break_chance``) falls as the
configurations are run more often: each row's SE is the SE of a median of n runs with the
demo's pooled run-to-run CV (``noise.median_se``), and the calibration's common shift shrinks
as its runs grow (``noise.calibration_se``).  `repeats_needed` takes the noise one demo
measured and asks, per judged target, for the smallest n (runs of every configuration, the
calibration's too; ``NoiseModel.at_repeats``) at which that chance is at most ``CHANCE``;
`budget` puts it beside the repeats the demo had and the run time n rounds take, from the
runs' makespans (first arrival to last finish: the start-up between runs left out, so a
lower bound).

It assumes the noise stays what the demo measured: the CVs come from the demo's own few
repeats (an estimate with its own error), and a quieter machine needs fewer.  A statement of
what the measurement would cost, not a change to it.  Pure numpy (no torch).
"""
from __future__ import annotations

import statistics
from typing import Any, Sequence

from psdlab.analysis.checks import check_int, check_range
from psdlab.validation.noise import NoiseModel

#: the chance section 3 of the demo's targets asks noise alone to stay under
CHANCE = 0.10
#: the most repeats per configuration `repeats_needed` tries
MOST = 64


def chance_at(noise: NoiseModel, rows: Sequence[Any], bound: float, n: int) -> float | None:
    """P(noise alone breaks ``bound`` on at least one of ``rows``) with ``n`` runs of every
    configuration; None when a row's noise cannot be told."""
    return noise.at_repeats(n).chance(rows, bound)


def repeats_needed(noise: NoiseModel, rows: Sequence[Any], bound: float,
                   chance: float = CHANCE, most: int = MOST) -> int | None:
    """The smallest n <= ``most`` at which `chance_at` is at most ``chance`` (None: not
    within ``most``, or the noise cannot be told).  The chance falls with n, so the first n
    found is the answer."""
    chance = check_range("chance", chance, 0.0, 1.0, lo_open=True, hi_open=True)
    most = check_int("most", most, 1)
    for n in range(1, most + 1):
        p = chance_at(noise, rows, bound, n)
        if p is None:
            return None
        if p <= chance:
            return n
    return None


def round_seconds(noise: NoiseModel) -> float:
    """One run of every configuration: the sum of each configuration's mean makespan."""
    return sum(statistics.fmean(r["makespan_s"] for r in runs)
               for runs in noise.values.values() if runs)


def budget(validation: Any, only: set[str] | None = None, chance: float = CHANCE,
           most: int = MOST) -> list[dict[str, Any]]:
    """Per judged target over the runs named in ``only``: the repeats its configurations had
    (median), the chance now, the repeats ``chance`` needs and the run time of that many
    rounds of every configuration (``run_s_needed``, None when out of reach); ``round_s``,
    one round, and ``run_s_now``, the runs this validation measured, for scale."""
    noise = validation.noise_model
    one_round = round_seconds(noise)
    now = sum(r["makespan_s"] for runs in noise.values.values() for r in runs)
    out = []
    for label, _metric, _source, bound, kind, rows in validation.target_rows(only):
        if bound is None:
            continue
        have = [noise.runs(run) for run in (noise.pairs.get(r.run, (r.run,))[0] for r in rows)
                if run in noise.values]
        need = repeats_needed(noise, rows, bound, chance, most)
        out.append({"target": label, "bound": bound, "kind": kind, "n": len(rows),
                    "repeats_now": statistics.median(have) if have else None,
                    "chance_now": noise.chance(rows, bound),
                    "repeats_needed": need, "round_s": one_round, "run_s_now": now,
                    "run_s_needed": None if need is None else need * one_round})
    return out

