"""`psdlab bench-adaptive`: the adaptive policy against every fixed configuration, measured on the
real CPU pair with the simulator's prediction made first (``bench_adaptive``), its result as frozen
records with results.json's object (``adaptive_results``), and its figure and text
(``adaptive_report``)."""
