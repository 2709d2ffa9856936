"""`psdlab frontier`: the paper's theory against a measured drafting Pareto frontier.  The run on
the CPU pair (``run_frontier``), the theory's envelope, fit and predicted optima (``theory``), the
verdicts (``verdicts``), and the files it writes: JSON, CSV, figure (``outputs``) and the markdown
summary and terminal report (``summary``).  The result is frozen records (``frontier_results``,
``prediction_results``); results.json is `FrontierResult.to_dict`."""
