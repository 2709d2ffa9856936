"""Serving-benchmark results as calibration data: vLLM ``bench serve --save-detailed`` and SGLang
``bench_serving --output-details`` result files (plus ``/metrics`` snapshots) replayed through the
simulator (``replay``), the step-cost fit that reproduces their TTFT and TPOT (``replay_fit``,
``calibration``), draft acceptance from engine counters (``acceptance_counts``), the drafter/target
pass-time prior (``drafter_prior``), what such a calibration cannot identify
(``identifiability``), and the prediction of a new result and its comparison with the measured
one (``predict``, ``compare_results``).  Speed benchmarks of psdlab itself live in ``gpu``,
``adaptive`` and the repository's ``benchmarks/``, not here."""
