"""`psdlab demo`: the measurement plan on the real CPU pair, calibration on part of it, the
held-out prediction and its report (apart from the calibrate/validate core it shares)."""
