"""The answer extractor, linear and honest: the hard cases found by hostile testing, the integer
cases of Math-Verify's own test suite, extraction time on degenerate outputs, and the rule that
exact mode never grades a wrong answer right."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlexp.evaluation.answers import PARSE_FAILURES, extract_answer, grade_output

# (model output, gold, correct in exact mode, parse method)
HARD_CASES = [
    # never two numbers concatenated, never a list read as one number
    (r"\boxed{3 \text{ and } 4}", "34", False, "unparsed"),
    (r"\boxed{3 \text{ and } 4}", "3", False, "unparsed"),
    (r"\boxed{12, 345}", "12345", False, "unparsed"),
    (r"\boxed{12, 345}", "345", False, "unparsed"),
    (r"\boxed{4 \text{ or more}}", "4", False, "unparsed"),
    ("The roots are 1, 2, 3", "3", False, "unparsed"),
    # never one part of an expression, boxed or not
    (r"\boxed{\frac{1+\sqrt{5}}{2}}", "2", False, "unparsed"),
    (r"So $x = \frac{1+\sqrt{5}}{2}$", "2", False, "unparsed"),
    (r"$\frac{1+\sqrt{5}}{2}$", "2", False, "unparsed"),
    (r"\boxed{\pm 2021}", "2021", False, "unparsed"),
    (r"The answer is $\pm 2021$", "2021", False, "unparsed"),
    (r"so $2x + z = 1$", "1", False, "unparsed"),
    (r"the solutions lie in $[0,1)$", "1", False, "unparsed"),
    ("from 3-5 we get", "5", False, "unparsed"),
    ("so the answer is 4x", "4", False, "unparsed"),
    ("**5**, no wait: **6 or 7**", "5", False, "unparsed"),  # the last bold answer decides
    ("The answer is 5, not 6.", "6", False, "unparsed"),
    ("The answer is 6 (not 5).", "5", False, "unparsed"),
    (r"$2\frac{1}{2}$", "2", False, "unparsed"),  # a mixed number
    ("so 1.5e3", "1", False, "unparsed"),
    # no last-number fallback after an unclosed (truncated) box
    (r"We get \boxed{12", "12", False, "unparsed"),
    (r"The answer is 12. So \boxed{12", "12", False, "unparsed"),
    (r"\boxed{3} then \boxed{12", "12", False, "unparsed"),
    # thousands separators (a space after the comma makes a list, see above)
    (r"\boxed{1 000}", "1000", True, "boxed"),
    ("The answer is 1 000", "1000", True, "last_number"),
    (r"\boxed{1\,000}", "1000", True, "boxed"),
    (r"\boxed{1{,}000}", "1000", True, "boxed"),
    (r"\boxed{1,000}", "1000", True, "boxed"),
    (r"The final answer is $14{,}916$. I hope it is correct.", "14916", True, "last_number"),
    (r"the total is $49,\!479$.", "49479", True, "last_number"),
    # a final statement after earlier boxes (the boxes were intermediate results)
    (r"first $\boxed{200}$ then $\boxed{255}$, so $10,455. Final Answer: The final answer is $10,455$. I hope it is "
     "correct.", "10455", True, "last_number"),
    (r"first $\boxed{200}$ then $\boxed{255}$. Final Answer: The final answer is $10,455$.", "255", False, "last_number"),
    (r"\boxed{14400}. Final Answer: The final answer is 14400. I hope it is correct.", "14400", True, "boxed"),
    (r"\boxed{12} I hope the answer is correct.", "12", True, "boxed"),
    (r"\boxed{5} so the answer is 3 or 4", "5", False, "unparsed"),
    # box forms
    (r"\boxed{{12}}", "12", True, "boxed"),
    (r"\boxed{ {{12}} }", "12", True, "boxed"),
    (r"\fbox{12}", "12", True, "boxed"),
    (r"\boxed 7", "7", True, "boxed"),
    (r"\boxed{\boxed{8}}", "8", True, "boxed"),
    # full-width digits, other scripts' digits and the unicode minus are normalised
    (r"\boxed{１２}", "12", True, "boxed"),
    ("答案是 ３４５", "345", True, "last_number"),
    (r"\boxed{٤٢}", "42", True, "boxed"),
    (r"\boxed{−7}", "-7", True, "boxed"),
    (r"\boxed{－7}", "-7", True, "boxed"),
    ("The answer is 10²", "102", False, "unparsed"),  # a superscript is not a digit
    # units and a leading "x =" are stripped, what remains is one number
    (r"\boxed{40\text{ cm}}", "40", True, "boxed"),
    (r"\boxed{90^\circ}", "90", True, "boxed"),
    (r"\boxed{25\%}", "25", True, "boxed"),
    (r"\boxed{\$18}", "18", True, "boxed"),
    (r"\boxed{x = 5}", "5", True, "boxed"),
    (r"\boxed{x = 3 = 4}", "4", False, "unparsed"),
    (r"\boxed{12^2}", "12", False, "unparsed"),
    (r"\boxed{5x}", "5", False, "unparsed"),
    # "0,111" is not a thousands number (Math-Verify reads it as 0.111)
    (r"\boxed{0,111}", "111", False, "unparsed"),
]


@pytest.mark.parametrize(("output", "gold", "correct", "method"), HARD_CASES)
def test_hard_cases(output, gold, correct, method):
    answer, got_method, got_correct = grade_output(output, gold, "exact")
    assert (got_correct, got_method) == (correct, method), answer


def test_unparsed_box_keeps_its_raw_content_for_math_verify():
    answer, method = extract_answer(r"so \boxed{2\sqrt{3}}.")
    assert (answer, method) == (r"2\sqrt{3}", "unparsed")
    assert grade_output(r"so \boxed{2\sqrt{3}}.", r"2\sqrt{3}", "exact")[2] is False  # exact: one number only
    assert grade_output(r"so \boxed{2\sqrt{3}}.", r"\sqrt{12}", "math_verify")[2] is True


def test_unparsed_is_a_parse_failure():
    assert "unparsed" in PARSE_FAILURES and "none" in PARSE_FAILURES


# ---------------------------------------------------------------------------- time

@pytest.mark.parametrize("unit", [r"\boxed{", r"\boxed{1", r"\fbox{\boxed{", "{" + r"\boxed 1 \boxed{"])
def test_extraction_is_linear_on_degenerate_outputs(unit):
    """200k characters of unclosed boxes (the old brace matcher rescanned the rest of the text for
    each of them: minutes at this size)."""
    text = unit * (200_000 // len(unit))
    start = time.perf_counter()
    answer, method = extract_answer(text)
    elapsed = time.perf_counter() - start
    assert method in PARSE_FAILURES or method == "boxed"
    assert elapsed < 2.0, f"{elapsed:.2f} s for {len(text)} characters"


# ---------------------------------------------------------------------------- never wrong right

_SEPARATORS = [", ", r" \text{ and } ", " and ", " or ", " + ", " - ", r" \pm ", r" \cdot ", r" \times ", "/", "^",
               r"\sqrt{", ":", " = "]


@given(st.integers(min_value=1, max_value=99_999), st.integers(min_value=1, max_value=99_999),
       st.sampled_from(_SEPARATORS), st.booleans())
@settings(max_examples=400, deadline=None)
def test_two_numbers_never_grade_as_one(a, b, separator, boxed):
    """An answer that joins two numbers is not one number: never graded as either of them or as
    their digits run together (except what it does state: ``a = b`` names b, ``a/b`` is a fraction)."""
    inner = f"{a}{separator}{b}" + ("}" if separator == r"\sqrt{" else "")
    output = rf"so \boxed{{{inner}}}" if boxed else f"so ${inner}$"
    wrong = {str(a), str(b), f"{a}{b}"}
    if separator == " = ":
        wrong.discard(str(b))
    if separator == "/" and a % b == 0:
        wrong.discard(str(a // b))  # 5/1 is 5
    for gold in wrong:
        answer, method, correct = grade_output(output, gold, "exact")
        assert not correct, (output, gold, answer, method)


# ---------------------------------------------------------------------------- Math-Verify's cases

CASES_FILE = Path(__file__).parent / "data" / "math_verify_integer_cases.json"

# Where rlexp's exact mode deliberately gives another verdict than Math-Verify's test: (test, case) → why.
DELIBERATE = {
    ("test_latex_notation", 4): "Math-Verify evaluates (9+1); exact mode does no arithmetic: unparsed",
    ("test_relations_math", 15): r"x \approx 11 states an approximation, not the value: unparsed",
    # the two below are the only cases where rlexp says correct and the test says incorrect: the test
    # checks that Math-Verify's LaTeX-only extraction refuses inline math spread over three lines;
    # the value is the gold, and Math-Verify with its default extraction (what rlexp's math_verify
    # mode uses) agrees with rlexp (asserted below).
    ("test_latex_notation", 5): "inline math over several lines is still the answer 9",
    ("test_latex_notation", 6): "inline math over several lines is still the answer 9",
}


def _load_cases():
    return json.loads(CASES_FILE.read_text())["cases"]


def _rlexp_verdict(case):
    """The integer side is the gold (exact mode's domain: integer golds), the other side the output."""
    if case["integer_side"] == "gold":
        gold, output = case["gold"], case["pred"]
    else:
        gold, output = case["pred"], case["gold"]
    return grade_output(output, gold.strip().strip("$").strip(), "exact")[2]


def test_math_verify_cases_are_the_integer_cases_of_its_suite():
    cases = _load_cases()
    assert len(cases) == 59
    assert {c["source"] for c in cases} == {"tests/test_all.py", "tests/test_boxed.py", "tests/test_open_thoughts.py",
                                            "tests/test_yujianll.py"}
    assert all(set(c) >= {"source", "test", "case", "gold", "pred", "expected"} for c in cases)


@pytest.mark.parametrize("case", _load_cases(), ids=lambda c: f"{c['test']}-{c['case']}")
def test_math_verify_integer_case(case):
    verdict = _rlexp_verdict(case)
    key = (case["test"], case["case"])
    if key in DELIBERATE:
        assert verdict != case["expected"], f"no longer differs: {DELIBERATE[key]}"
        if verdict:  # rlexp correct, the test incorrect: Math-Verify's default extraction must agree with rlexp
            from math_verify import parse, verify

            assert verify(parse(case["gold"]), parse(case["pred"]))
    else:
        assert verdict == case["expected"]


def test_math_verify_agreement_and_no_false_positive():
    cases = _load_cases()
    verdicts = [(_rlexp_verdict(c), c) for c in cases]
    agree = sum(v == c["expected"] for v, c in verdicts)
    assert agree >= 50 and agree == len(cases) - len(DELIBERATE)
    false_positives = [(c["test"], c["case"]) for v, c in verdicts if v and not c["expected"]]
    assert set(false_positives) <= {("test_latex_notation", 5), ("test_latex_notation", 6)}
