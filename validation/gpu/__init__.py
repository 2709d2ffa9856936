"""`psdlab bench-gpu`, the one GPU command (a speed benchmark of psdlab on a device): the command
itself (``bench_gpu``), per-pass forward times against the memory-streaming floor (``passes``),
the device layouts it runs AR, SD-separate and PSD on with calibrate-then-validate
(``layouts``), the lossless rule's judgement of divergences (``lossless``), its result as frozen
records with summary.json's object (``gpu_results``) and its markdown summary (``gpu_report``)."""
