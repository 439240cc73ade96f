"""autograder.grader.keys: answer keys load from the course directory and refuse to serve student code."""
import inspect

import pytest

from autograder import checks
from autograder.grader import keys

KEY = '''
from autograder.grader.keys import answer

@answer
def double(x):
    return 2 * x

@answer
class Counter:
    def __init__(self):
        self.n = 0
'''


@pytest.fixture
def course(tmp_path, monkeypatch):
    (tmp_path / "nbgrader_config.py").write_text("")
    (tmp_path / "solutions" / "99_demo").mkdir(parents=True)
    (tmp_path / "solutions" / "99_demo" / keys.FILE_NAME).write_text(KEY)
    monkeypatch.delenv(keys.ROOT_ENV_VAR, raising=False)
    monkeypatch.delitem(keys.sys.modules, "answer_key_99_demo", raising=False)
    return tmp_path


def test_the_course_is_found_from_any_folder_below_it(course, monkeypatch):
    deep = course / "autograded" / "alice" / "99_demo"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert keys.course_root() == course.resolve()
    monkeypatch.setenv(keys.ROOT_ENV_VAR, str(course / "solutions"))
    assert keys.course_root() == (course / "solutions").resolve()


def test_outside_a_course_the_error_says_what_to_set(tmp_path, monkeypatch):
    monkeypatch.delenv(keys.ROOT_ENV_VAR, raising=False)
    with pytest.raises(FileNotFoundError, match=keys.ROOT_ENV_VAR):
        keys.course_root(tmp_path)


def test_a_key_serves_the_grader_and_is_loaded_once(course):
    key = keys.answer_key("99_demo", root=course)
    assert key.double(3) == 6 and key.Counter().n == 0
    assert keys.answer_key("99_demo", root=course) is key
    with pytest.raises(FileNotFoundError, match="no answer key for 98_none"):
        keys.answer_key("98_none", root=course)


def test_a_key_refuses_to_run_inside_student_code(course):
    key = keys.answer_key("99_demo", root=course)
    with pytest.raises(checks.GradingError, match=r"double: called the course's answer key \(99_demo/answer_key.py: "
                                                  r"double\): write your own implementation"):
        checks.call_student("double", key.double, 3)
    with pytest.raises(checks.GradingError, match="answer key"):
        checks.call_student("Counter", lambda: key.Counter())
    # an answer that swallows exceptions cannot hide it (the refusal is not an Exception)
    def sly(x):
        try:
            return key.double(x)
        except Exception:
            return 0
    with pytest.raises(checks.GradingError, match="answer key"):
        checks.call_student("double", sly, 3)
    assert key.double(4) == 8  # outside student code it serves the grader again


def test_the_guard_leaves_no_handle_to_the_unguarded_answer(course):
    """A submission once called `K.grad_fn_names.__wrapped__` (set by functools.wraps) and scored 20/20
    in plain mode."""
    key = keys.answer_key("99_demo", root=course)
    assert not hasattr(key.double, "__wrapped__") and inspect.unwrap(key.double) is key.double
    assert key.double.__name__ == "double" and not hasattr(key.Counter.__init__, "__wrapped__")


def test_a_grade_runs_root_wins_over_the_environment_and_the_working_directory(course, tmp_path_factory,
                                                                                 monkeypatch):
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # not below the course
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv(keys.ROOT_ENV_VAR, str(elsewhere))
    with keys.grading_root(course):
        assert keys.course_root() == course.resolve()
        with keys.grading_root(None):  # None keeps the run's root
            assert keys.course_root() == course.resolve()
    assert keys.course_root() == elsewhere.resolve()
    monkeypatch.delenv(keys.ROOT_ENV_VAR)
    with pytest.raises(keys.MissingAnswerKey, match="no course directory"):
        keys.course_root()
