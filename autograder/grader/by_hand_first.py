"""Plain `nbgrader autograde`, with the by-hand exercises graded first, as class grading grades them.

nbgrader runs a notebook's cells in order in one kernel, so a patch in an early cell (of a module, of
the course's checks) or a module the notebook writes changes what a by-hand answer's names mean when
its test cell runs. Here (nbgrader_config.py) the fresh kernel first runs the answer program alone
(`autograder.grader.judge`: the statements the by-hand answers reach, and nothing else) and their test
cells; then its namespace is reset and the notebook runs as nbgrader runs it, those test cells left out.
"""
import nbformat
from nbclient import NotebookClient
from nbgrader.preprocessors import Execute

from autograder.grader import judge
from autograder.grader.execution import SteadyClientMixin
from autograder.grader.sandbox import RESET


class ByHandFirstExecute(SteadyClientMixin, Execute):
    """nbgrader's Execute without the widget stall (autograder/grader/execution.py), by-hand exercises first."""

    def preprocess(self, nb, resources=None, km=None):
        name = (resources or {}).get("nbgrader", {}).get("assignment")
        examination = judge.examine(nb, judge.baseline(judge.course_root(self.config), name)) if name else None
        if examination is None or not examination.by_hand:
            return super().preprocess(nb, resources, km)
        NotebookClient.__init__(self, nb, km)  # as nbconvert's ExecutePreprocessor.preprocess does
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        first = set(examination.by_hand)
        refused = judge.cell_verdicts(nb, judge.baseline(judge.course_root(self.config), name), examination)
        with self.setup_kernel():
            info = self.wait_for_reply(self.kc.kernel_info())
            self.nb.metadata["language_info"] = info["content"]["language_info"]
            for cell in examination.program:
                self._aside(cell.source, cell.index)
            last = [i for i in examination.by_hand if self.nb.cells[i].metadata.nbgrader.grade_id in refused]
            for index in [*(i for i in examination.by_hand if i not in last), *last]:  # refused answers after the
                self.preprocess_cell(self.nb.cells[index], resources, index)  # others: no tampering with their checks
            self._aside(RESET, examination.by_hand[0])
            for index, cell in enumerate(self.nb.cells):
                if index not in first:
                    self.preprocess_cell(cell, resources, index)
        self.set_widgets_metadata()
        return self.nb, self.resources

    def _aside(self, source, index):
        """Run `source` as a cell of its own at the place of cell `index`, which stays as it was."""
        original = self.nb.cells[index]
        try:
            self.execute_cell(nbformat.v4.new_code_cell(source), index, store_history=False)
        finally:
            self.nb.cells[index] = original
