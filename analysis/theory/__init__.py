"""The closed-form theory of parallel speculative decoding (PSD).

* `frontiers`: drafting frontiers f(t) (exponential, Leviathan, empirical fit, mixtures).
* `optimum`: exact T_SD / T_PSD and optimal drafting times for any frontier (numeric).
* `exponential`: closed forms for f(t) = 1 - exp(-alpha t) via Lambert W; x = alpha*V.
* `paper`: the paper's Lemma 1, Lemma 2, Theorem 1 as written, regions and the peak; the
  module docstring records where each claim holds and where it fails.
* `batch`: batch-aware AR / SD / PSD throughput and per-token latency, labelled comparisons.
* `jitter`: E[max(t, V)] under random step times and the PSD gain it costs.
"""
from psdlab.analysis.theory.batch import (BASES, AffineDraftTime, AffineVerifyTime, BatchModel,
                                   Comparison, GeometricRate, ModeResult, ar, best_k,
                                   compare, compare_all, psd, sd)
from psdlab.analysis.theory.exponential import (exact_ratio, exact_saving, exponential_optimum,
                                         peak_alpha_v, psd_draft_time_exponential,
                                         sd_draft_time_exponential, sd_opt_draft,
                                         t_psd_exponential, t_sd_exponential)
from psdlab.analysis.theory.frontiers import (EmpiricalFrontier, ExponentialFrontier,
                                       LeviathanFrontier, MixtureFrontier)
from psdlab.analysis.theory.jitter_max import DISTRIBUTIONS, JitterResult, expected_max, jitter_gain
from psdlab.analysis.theory.optimum import (KOptimum, Optimum, optimal_k, optimal_times,
                                     psd_objective, sd_objective)
from psdlab.analysis.theory.paper import (THEOREM1_RATIO, THEOREM1_SAVING, Peak, Theorem1Check,
                                   lemma1_sd_lower_bound, lemma1_t_star, lemma1_t_star_bounds,
                                   lemma2_t_psd, paper_ratio_bound, paper_saving_bound, peak,
                                   region, theorem1_check, theorem1_threshold)

__all__ = [
    "BASES", "AffineDraftTime", "AffineVerifyTime", "BatchModel", "Comparison",
    "GeometricRate", "ModeResult", "ar", "best_k", "compare", "compare_all", "psd", "sd",
    "exact_ratio", "exact_saving", "exponential_optimum", "peak_alpha_v",
    "psd_draft_time_exponential", "sd_draft_time_exponential", "sd_opt_draft",
    "t_psd_exponential", "t_sd_exponential",
    "EmpiricalFrontier", "ExponentialFrontier", "LeviathanFrontier", "MixtureFrontier",
    "DISTRIBUTIONS", "JitterResult", "expected_max", "jitter_gain",
    "KOptimum", "Optimum", "optimal_k", "optimal_times", "psd_objective", "sd_objective",
    "THEOREM1_RATIO", "THEOREM1_SAVING", "Peak", "Theorem1Check", "lemma1_sd_lower_bound",
    "lemma1_t_star", "lemma1_t_star_bounds", "lemma2_t_psd", "paper_ratio_bound",
    "paper_saving_bound", "peak", "region", "theorem1_check", "theorem1_threshold",
]
