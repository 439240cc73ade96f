"""Feedback keeps the checks' messages and drops the hidden tests, from source and tracebacks."""
import course
import nbformat
from nbconvert import HTMLExporter
from test_nbgrader_e2e import hidden_lines, page_text

from autograder.grader.feedback import NOTE, HideHiddenTests, without_hidden_tests

GRADE = {"nbgrader": {"grade": True, "solution": False, "locked": True, "points": 1,
                      "grade_id": "f", "schema_version": 3}}


def graded_cell():
    cell = nbformat.v4.new_code_cell(
        '"""f doubles."""\nassert f(1) == 2\n### BEGIN HIDDEN TESTS\nsecret_case = f(21)  # 42\n### END HIDDEN TESTS',
        metadata=GRADE)
    cell.outputs = [nbformat.v4.new_output("error", ename="GradingError", evalue="f: wrong values",
                                           traceback=["----> 4 secret_case = f(21)  # 42", "GradingError: f"])]
    return cell


def test_hidden_region_becomes_one_note_and_visible_lines_stay():
    source = without_hidden_tests(graded_cell().source)
    assert "secret_case" not in source and "assert f(1) == 2" in source and "not shown" in source


def test_an_unpaired_region_hides_the_whole_cell():
    """nbgrader's ClearHiddenTests refuses a region without its end; the feedback then shows no line of it."""
    assert without_hidden_tests("visible()\n### BEGIN HIDDEN TESTS\nsecret_case = f(21)") == NOTE


def test_tracebacks_shrink_to_the_message_and_other_cells_are_untouched():
    plain = nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS is only text here")
    nb = nbformat.v4.new_notebook(cells=[graded_cell(), plain])
    nb, _ = HideHiddenTests().preprocess(nb, {})
    assert nb.cells[0].outputs[0].traceback == ["GradingError: f: wrong values"]
    assert nb.cells[1].source == plain.source


def test_the_leak_check_finds_hidden_tests_in_an_unfiltered_page(tmp_path):
    name = course.assignment_names()[0]
    solution = course.read(course.solution_path(name))
    page = tmp_path / "page.html"
    page.write_text(HTMLExporter().from_notebook_node(solution)[0])
    secrets = hidden_lines(solution, course.read(course.release_path(name)))
    assert [line for line in secrets if line in page_text(page)]


def test_failure_kinds_blank_numbers_but_keep_the_digits_of_names():
    """reports/failure_kinds.csv counts alike failures once: the values blanked, the names kept whole, so "the
    gradient of b1" and "the gradient of W2" stay two kinds (issue 37: both read "b#", "W#")."""
    from autograder.grader.report import message_kind

    kinds = [message_kind(m) for m in (
        "manual_backward: wrong values in the gradient of b1\n  on input: ...",
        "manual_backward: wrong values in the gradient of b1 at index (3, 0): 0.25 against -1.5e-05",
        "manual_backward: wrong values in the gradient of W2",
        "steps: dsq has dtype torch.float64, expected torch.float32 (N = 6, eps = 1e-05, .5)")]
    assert kinds == ["manual_backward: wrong values in the gradient of b1",
                     "manual_backward: wrong values in the gradient of b1 at index (#, #): # against #",
                     "manual_backward: wrong values in the gradient of W2",
                     "steps: dsq has dtype torch.float64, expected torch.float32 (N = #, eps = #, #)"]
