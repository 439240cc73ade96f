"""Figures a GPU measured, recorded for learners without one (autograder/learner/recorded.py), and what
notebook 09 prints where its kernels run in Triton's interpreter: the record read and shown, never a
number the interpreter cannot compute (issue 37)."""
import re

import course
import nbformat
import pytest

from autograder.learner import recorded

NOTEBOOK = "09_kernels"


def code_cell(nb, marker):
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
    return cell


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The set-up cell, the row_max kernel, the accumulator cell and section 4.5's cell of 09, run in a kernel
    here (no GPU: the interpreter), then 4.5's printing with figures a GPU could have measured."""
    nb = course.read(course.solution_path(NOTEBOOK))
    cells = [next(c for c in nb.cells if c.cell_type == "code"), code_cell(nb, "def row_max_kernel"),
             code_cell(nb, "def sum_of_squares_kernel"), code_cell(nb, "ROW_MAX_BLOCK_SIZES")]
    fake_gpu = "show_block_figures({256: (30, 0, 14, 2e-4), 4096: (60, 0, 7, 1.5e-4), 16384: (170, 2, 2, 3e-4)})"
    mini = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c.source) for c in cells]
                                    + [nbformat.v4.new_code_cell(fake_gpu)], metadata=nb.metadata)
    path = tmp_path_factory.mktemp("nb09") / "part.ipynb"
    nbformat.write(mini, path)
    out = course.execute(path, path.parent)
    for cell in out.cells:
        assert not course.failure_text(cell), course.failure_text(cell)
    text = ["".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream") for cell in out.cells]
    if "interpreter" not in text[0]:
        pytest.skip("the kernels are compiled here: these tests are about a machine without a GPU")
    return {"accumulator": text[2], "blocks": text[3], "fake gpu": text[4]}


def test_the_record_says_where_and_when_it_was_measured():
    record = recorded.ROW_MAX_BLOCK_SIZES
    assert {"machine", "torch", "triton", "date", "source", "blocks", "slowest over fastest, at most"} <= set(record)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", record["date"]) and "H200" in record["machine"]
    assert all({"registers per thread", "programs per SM"} == set(v) for v in record["blocks"].values())


def test_section_4_5_prints_the_recorded_figures_without_a_gpu(ran):
    shown, record = ran["blocks"], recorded.ROW_MAX_BLOCK_SIZES
    assert "needs a GPU" in shown
    for part in (record["machine"], record["torch"], record["triton"], record["date"]):
        assert part in shown, (part, shown)
    for block, figures in record["blocks"].items():
        (line,) = [line for line in shown.splitlines() if f"BLOCK {block:>6,}:" in line]
        assert f"{figures['registers per thread']} registers a thread" in line, line
        assert f"{figures['programs per SM']} programs per SM" in line, line
    assert f"at most {record['slowest over fastest, at most']}x" in shown


def test_on_a_gpu_the_measured_figures_stand_beside_the_recorded_ones(ran):
    shown, smallest = ran["fake gpu"], recorded.ROW_MAX_BLOCK_SIZES["blocks"][256]
    assert (f"BLOCK    256: {smallest['registers per thread']} registers a thread, {smallest['programs per SM']} "
            "programs per SM at once; here: 30 registers, 0 spilled, 14 programs per SM") in shown, shown
    assert "here: 170 registers, 2 spilled, 2 programs per SM" in shown and "here: 2.00x" in shown, shown


def test_the_figures_come_from_the_record_not_from_the_notebook():
    """No cell of 09 states a recorded figure itself: change the record and the notebook follows."""
    record = recorded.ROW_MAX_BLOCK_SIZES
    ratio = record["slowest over fastest, at most"]
    stated = [f"{v['registers per thread']} registers" for v in record["blocks"].values()] + [
        f"{v['programs per SM']} programs" for v in record["blocks"].values()] + [f"{ratio}x", f"{ratio}×"]
    nb = course.read(course.solution_path(NOTEBOOK))
    found = [(i, s) for i, c in enumerate(nb.cells) for s in stated if s in c.source]
    assert found == []


def test_the_interpreter_prints_no_bfloat16_sum_it_cannot_compute(ran):
    shown = ran["accumulator"]
    assert not re.search(r"bf16 accumulator: sum of squares", shown), shown
    assert "not launched here" in shown and "fp32 accumulator: sum of squares 2048" in shown, shown
    # the kernel's four bfloat16 lanes, added in torch: each stops at 256, so the row sums to 1024, not 2048
    assert "added in torch's bfloat16: each lane 256, sum of squares 1024 (in float32: 2048)" in shown, shown
