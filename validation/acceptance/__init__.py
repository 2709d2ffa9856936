"""The acceptance side of calibration from traces: per-request greedy match patterns
(``match_patterns``), per-position rates and the fitted acceptance models (``fit``), the model
that transfers to prompts the calibration never served (``transfer``), the acceptance pool of
untimed probe prompts (``pool``) and the cross-validated choice between the models
(``cross_validation``)."""
