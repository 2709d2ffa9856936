"""psdlab's math layer: closed-form PSD theory, the step-level trace format, the metrics
computed from traces and the PSD batch-assignment rule (``batching``, shared by the runtime and
the simulator).  numpy/scipy only; imports nothing else of psdlab's."""
