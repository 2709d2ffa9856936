"""psdlab's math layer: closed-form PSD theory, the step-level trace format and the metrics
computed from traces.  numpy/scipy only; imports nothing else of psdlab's."""
