"""Answer keys: reference implementations that are themselves answers, loaded by path for hidden tests.

Where PyTorch has no feature that computes an exercise's result without being the exercise
(`grad_fn_names`, `train_step`, ...), the hidden tests compare with a reference that is an
answer. Such references live only in the instructor's course directory, beside the notebook
whose hidden tests use them (`solutions/<notebook>/answer_key.py`; `make release` ships only
notebooks), and never in a package: nothing a learner installs holds them. Checks receive a
reference as an argument, so the checks modules stay answer-free.

Every key is marked with `@answer`: it refuses to run inside a student call, so an answer that
imports the key ("write it yourself") fails with a message that says so, in plain grading too,
where hidden tests and student code share a kernel (the guard keeps no `__wrapped__` handle to the
unguarded function; but in plain mode the kernel can read the key's file, so plain mode trusts the
kernel with the key, see the README). In trusted grading the kernel cannot read the course
directory at all.

Which course: the one a grade run was given (`grading_root`, set by `backprop-course grade --root`
for the test cells it runs), else $COURSE_ROOT, else the nearest course directory above the working
directory. A key that cannot be found is the grader's failure (`MissingAnswerKey`), never the
student's: trusted grading reports that submission as not graded.
"""
import contextlib
import importlib.util
import inspect
import os
import pathlib
import sys

from autograder.checks.student_calls import UsedAnswerKey, inside_student_call

ROOT_ENV_VAR = "COURSE_ROOT"
FILE_NAME = "answer_key.py"


_grading_root = None  # the course a grade run was given; see grading_root


class MissingAnswerKey(FileNotFoundError):
    """The grader cannot find a course directory or an answer key: its own failure, not the student's."""


@contextlib.contextmanager
def grading_root(root):
    """Answer keys come from `root` (the course a grade run was given) while the block runs; None
    leaves the usual search in place."""
    global _grading_root
    before, _grading_root = _grading_root, pathlib.Path(root).resolve() if root is not None else _grading_root
    try:
        yield
    finally:
        _grading_root = before


def course_root(start=None) -> pathlib.Path:
    """The course directory: the grade run's (`grading_root`), else $COURSE_ROOT, else the nearest
    folder up from `start` (the working directory) that holds nbgrader_config.py and solutions/."""
    if _grading_root is not None:
        return _grading_root
    if os.environ.get(ROOT_ENV_VAR):
        return pathlib.Path(os.environ[ROOT_ENV_VAR]).resolve()
    here = pathlib.Path(start or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "nbgrader_config.py").is_file() and (folder / "solutions").is_dir():
            return folder
    raise MissingAnswerKey(f"no course directory (nbgrader_config.py beside solutions/) above {here}; "
                            f"set {ROOT_ENV_VAR} to the course directory")


def key_path(notebook: str, root=None) -> pathlib.Path:
    return (root or course_root()) / "solutions" / notebook / FILE_NAME


def answer_key(notebook: str, root=None):
    """The answer-key module of `notebook`, loaded once per process under `answer_key_<notebook>`.

    Registered in sys.modules, so that a key that slipped into a call shipped to a kernel would be
    pickled by reference and fail to load there, never travel as code.
    """
    name = f"answer_key_{notebook}"
    if name in sys.modules:
        return sys.modules[name]
    path = key_path(notebook, root)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or not path.is_file():
        raise MissingAnswerKey(f"no answer key for {notebook}: {path} is missing")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _refuse_inside_student_code(fn, label):
    def guarded(*args, **kwargs):
        if inside_student_call():
            raise UsedAnswerKey(label)
        return fn(*args, **kwargs)
    # the name and docstring only: functools.wraps would also set __wrapped__, a handle that undoes the guard
    guarded.__name__, guarded.__qualname__, guarded.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    guarded.__module__ = fn.__module__
    return guarded


def answer(thing):
    """Mark a function or class of an answer key: it refuses to run inside a student call."""
    notebook = pathlib.Path(inspect.getfile(thing)).parent.name
    label = f"the course's answer key ({notebook}/{FILE_NAME}: {thing.__qualname__})"
    if isinstance(thing, type):
        thing.__init__ = _refuse_inside_student_code(thing.__init__, label)
        return thing
    return _refuse_inside_student_code(thing, label)
