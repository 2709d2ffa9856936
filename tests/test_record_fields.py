"""analysis.checks.RecordFields: the one check of a parsed record's fields (the trace reader's
and the MineDraft importer's), errors naming where, the field and what was expected."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from psdlab.analysis.checks import RecordFields
from psdlab.analysis.trace import TraceFormatError


def test_errors_name_where_the_field_and_the_kind_in_the_callers_error_class():
    f = RecordFields({"k": "4", "t": True, "n": None}, "t.jsonl:3", "verify.",
                     error=TraceFormatError)
    with pytest.raises(TraceFormatError, match=r"^t.jsonl:3: field 'verify.k': expected an "
                                               r"integer, got '4'$"):
        f.get("k", "int")
    with pytest.raises(TraceFormatError, match="field 'verify.t': expected a finite number"):
        f.get("t", "num")
    with pytest.raises(TraceFormatError, match="field 'verify.n': missing"):
        f.get("n", "str")
    assert f.get("n", "str", optional=True, default="x") == "x"


def test_an_integer_too_large_for_a_float_is_not_a_finite_number():
    with pytest.raises(ValueError, match="expected a finite number"):
        RecordFields({"x": 10 ** 400}, "w").get("x", "num")


@given(st.one_of(st.integers(-5, 10 ** 6), st.floats(allow_nan=True, allow_infinity=True)))
def test_count_takes_exactly_the_non_negative_integral_numbers(v):
    f = RecordFields({"c": v}, "w")
    good = v == v and abs(v) != float("inf") and v >= 0 and float(v).is_integer()
    if good:
        assert f.count("c") == int(v)
    else:
        with pytest.raises(ValueError, match="field 'c': expected a"):
            f.count("c")
