"""nbgrader configuration for the course: run nbgrader commands from the repository root."""
from nbgrader.converters import Autograde, GenerateFeedback
from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, Execute, SaveAutoGrades

from autograder.grader.by_hand_first import ByHandFirstExecute
from autograder.grader.feedback import HideHiddenTests
from autograder.grader.judge import ByHandRules
from autograder.grader.recording import BoundedPartialCredit
from autograder.grader.sanitize import RestoreFromSource

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


# Each submitted notebook is rebuilt from the gradebook's source cells (autograder/grader/sanitize.py):
# a duplicated, added, retyped or re-flagged grade cell cannot fail the whole notebook or earn
# points, and a test cell that is just as released (hidden tests removed) is restored without
# nbgrader's "checksum has changed" warning; only a real edit is logged.
c.Autograde.sanitize_preprocessors = [ClearOutput, RestoreFromSource, CheckCellMetadata]

# Execution without the widget stall, the by-hand exercises graded first in the fresh kernel after their
# answers alone (autograder/grader/by_hand_first.py); the by-hand judge's verdicts, read from the source
# (autograder/grader/judge.py); a test cell's last value counts as partial credit only between 0 and
# its points (nbgrader would raise on more and give full marks for less than 0).
_steps = []
for _step in Autograde.class_traits()["autograde_preprocessors"].default():
    if _step is SaveAutoGrades:
        _steps += [ByHandRules, BoundedPartialCredit]
    _steps.append(ByHandFirstExecute if _step is Execute else _step)
c.Autograde.autograde_preprocessors = _steps

# nbgrader scores a test cell that writes to stderr as 0; library warnings must not cost points.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"(UserWarning|FutureWarning|DeprecationWarning|RuntimeWarning)"


# Feedback shows each check's message, never the hidden tests' source (see autograder/grader/feedback.py).
c.GenerateFeedback.preprocessors = [
    HideHiddenTests, *GenerateFeedback.class_traits()["preprocessors"].default()
]
