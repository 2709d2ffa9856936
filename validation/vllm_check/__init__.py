"""`psdlab check-vllm`: calibrate on one vLLM server configuration and predict the others.  The
harness that starts ``vllm serve``, measures and re-judges (``harness``), and the judgement:
per-run measurements, the calibration rule, predicted vs measured and the markdown
(``judgement``); every run's files in one ``runs.json`` (``runs_bundle``); the plan, the
records and the report, frozen, and the report's one JSON object (``check_results``)."""
