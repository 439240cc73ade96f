"""nbgrader configuration for the course: run nbgrader commands from the repository root."""
import os

from nbgrader.converters import Autograde, GenerateFeedback
from nbgrader.preprocessors import Execute

from autograder.grader.classgrade import EXECUTED_ENV, SANITIZE, Recorded
from autograder.grader.execution import SteadyClientMixin
from autograder.grader.feedback import HideHiddenTests

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "backprop-course"
# solutions/ is the instructor source (solutions + hidden tests); `make release` turns it into notebooks/.
c.CourseDirectory.source_directory = "solutions"
# nbgrader copies every other file of a source folder into the release, answers included. Its
# `ignore` option takes globs only, so spell out "every name that does not end in .ipynb" (and
# every dot-file, which `*` does not match): only notebooks are ever released.
_END = ".ipynb"
c.CourseDirectory.ignore = (
    ["__pycache__", ".*", f"*[!{_END[-1]}]"]
    + [f"*[!{_END[-i - 1]}]{_END[-i:]}" for i in range(1, len(_END))]
    + [_END[-i:] for i in range(1, len(_END))]
)

# A cell of ours runs in seconds on a laptop CPU; a minute means a student's loop never ends.
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True


class SteadyExecute(SteadyClientMixin, Execute):
    """nbgrader's Execute, without the stall that widget cells cause (see autograder/grader/execution.py)."""


# A duplicated test cell must not fail the whole notebook (see classgrade.DropDuplicateIds).
c.Autograde.sanitize_preprocessors = SANITIZE

# `backprop-course grade` has already run each submission in a sandbox, in parallel: nbgrader
# then records the scores from those runs instead of executing the notebooks again.
_run = Recorded if os.environ.get(EXECUTED_ENV) else SteadyExecute
c.Autograde.autograde_preprocessors = [
    _run if step is Execute else step
    for step in Autograde.class_traits()["autograde_preprocessors"].default()
]

# nbgrader scores a test cell that writes to stderr as 0; library warnings must not cost points.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"(UserWarning|FutureWarning|DeprecationWarning|RuntimeWarning)"


# Feedback shows each check's message, never the hidden tests' source (see autograder/grader/feedback.py).
c.GenerateFeedback.preprocessors = [
    HideHiddenTests, *GenerateFeedback.class_traits()["preprocessors"].default()
]
