"""benchmarks/course_runtime.py keeps the course's promise: it fails, naming the notebook, when one
takes 30 s or more, and its table keeps the format the README quotes. Notebooks are not run here:
their times are made up."""
import importlib.util

import course
import pytest

SPEC = importlib.util.spec_from_file_location("course_runtime", course.ROOT / "benchmarks" / "course_runtime.py")
course_runtime = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(course_runtime)


def run_with_times(monkeypatch, capsys, slow: dict):
    """main()'s exit status and output where every notebook takes 5 s but those of `slow`."""
    monkeypatch.setattr(course_runtime, "run", lambda path, workdir: slow.get(path.stem, 5.0))
    status = course_runtime.main([])
    return status, capsys.readouterr()


def test_every_notebook_under_the_limit_passes_with_the_readmes_table(monkeypatch, capsys):
    status, out = run_with_times(monkeypatch, capsys, {})
    lines = out.out.splitlines()
    assert status == 0 and out.err == ""
    assert lines[0].startswith("machine: ") and "01_chain_rule               5.0 s  (kernel start included)" in lines
    assert lines[-1] == "total" + " " * 20 + f"{5.0 * (len(course.assignment_names()) + 1):6.1f} s"  # + review
    assert "review                      5.0 s  (kernel start included)" in lines


@pytest.mark.parametrize("seconds", [30.0, 41.26])
def test_a_notebook_of_30_s_or_more_fails_and_is_named(monkeypatch, capsys, seconds):
    status, out = run_with_times(monkeypatch, capsys, {"02_micrograd": seconds, "03_vjp": 29.9})
    assert status == 1 and f"02_micrograd ({seconds:.1f} s)" in out.err and "03_vjp" not in out.err, out.err
    assert f"02_micrograd               {seconds:4.1f} s  (kernel start included)" in out.out.splitlines()


def test_some_notebooks_only_and_a_name_the_course_lacks_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(course_runtime, "run", lambda path, workdir: 5.0)
    assert course_runtime.main(["03_vjp"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == ["03_vjp", "total"]
    with pytest.raises(SystemExit, match="no notebook named 99_nothing"):
        course_runtime.main(["99_nothing"])
