"""The GPU path (`make test-gpu`): every solution notebook, the trusted grading of every reference
solution and the benchmarks, on CUDA (COURSE_DEVICE=cuda).

Each test proves that the GPU was used, not only that nothing failed: the notebook's kernel and
the grader's process must have allocated CUDA memory, and the benchmarks must report a CUDA
device. Where torch sees no CUDA device every test here is skipped, with one line for all
(tests/conftest.py).
"""
import subprocess
import sys

import course
import nbformat
import pytest

pytestmark = pytest.mark.gpu

NAMES = course.assignment_names()
# Appended to each notebook: which device the course chose, and how much CUDA memory the kernel used.
PROBE = ("import torch\nfrom autograder.learner.device import get_device\n"
         "print('device-probe', get_device().type, torch.cuda.max_memory_allocated())")
# The benchmarks that put work on the device, with small arguments where they take any, and what
# their output must say. engine.py is left out: notebook 02's engine is pure Python (no device).
BENCHMARKS = {
    "attention.py": ([], "peak MiB"),
    "checkpointing.py": ([], "device: cuda"),
    "course_runtime.py": ([], "CUDA"),
    "grading.py": (["--students", "2", "--repeats", "1", "--workers", "2", "01_chain_rule"], "speed-up"),
    "kernels.py": ([], "of peak"),
}


@pytest.fixture
def on_cuda(monkeypatch):
    """COURSE_DEVICE=cuda for this process and every kernel or script it starts."""
    monkeypatch.setenv("COURSE_DEVICE", "cuda")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", NAMES)
def test_solution_notebook_passes_on_cuda(name, on_cuda, tmp_path):
    nb = course.read(course.solution_path(name))
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, path)
    ran = course.execute(path, tmp_path)
    broken = {course.nbgrader_meta(c).get("grade_id", i): course.failure_text(c)
              for i, c in enumerate(ran.cells) if c.cell_type == "code" and course.failure_text(c)}
    assert broken == {}, f"{name} on CUDA: cells that error or write to stderr"
    said = "".join(o.get("text", "") for o in ran.cells[-1].outputs).split()
    assert len(said) == 3 and said[:2] == ["device-probe", "cuda"] and int(said[2]) > 0, (
        f"{name} did not use the GPU: {said}")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", NAMES)
def test_reference_solution_earns_full_marks_in_trusted_mode_on_cuda(name, on_cuda):
    """As tests/test_classgrade.py's trusted test, on CUDA: the kernel computes, the grader's
    process compares with references it computes on the GPU."""
    import torch

    from autograder.grader import grading_task, trusted
    from autograder.grader.sandbox import Limits, run_notebook

    source = course.read(course.solution_path(name))
    names = trusted.student_names(c.source for c in course.solution_cells(source))
    torch.cuda.init()  # the allocator's statistics exist only once CUDA is initialised
    torch.cuda.reset_peak_memory_stats()
    problems = run_notebook(source, Limits(cell_seconds=120), trusted_names=names,
                            first=grading_task.by_hand_first(source, course.ROOT, name))
    failures = {course.nbgrader_meta(c)["grade_id"]: [o.get("evalue") for o in c.outputs if o.output_type == "error"]
                for c in course.grade_cells(source)}
    assert problems == [] and {k: v for k, v in failures.items() if v} == {}
    assert torch.cuda.max_memory_allocated() > 0, "the grader's references did not run on the GPU"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("script", sorted(BENCHMARKS))
def test_benchmark_runs_on_cuda(script, on_cuda):
    args, expected = BENCHMARKS[script]
    ran = subprocess.run([sys.executable, str(course.ROOT / "benchmarks" / script), *args], cwd=course.ROOT,
                         capture_output=True, text=True, timeout=590)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-4000:]
    assert expected in ran.stdout, ran.stdout[-4000:]
    print(ran.stdout)  # the figures, shown with -s or in a failure's captured output
