"""Flag what a submission's own code does to the grader, for the instructor to read.

Every code cell a student could edit (all but the test cells, which the grader rebuilds) is read
as code (`autograder.grader.reading`): imports, assignments and attribute chains are followed, so
an alias or a line continuation hides nothing. Flagged, on the lines the student wrote (a line of
the notebook as students receive it, Colab cell included, is the course's):

- a store, `setattr` or `del` on a module or anything reached from one (`torch.exp = ...`,
  `checks.student_calls._autograd_forbidden = ...`), a class's `__module__` set by hand;
- reflection the judge cannot follow: computed `getattr`, `exec`, `eval`, `compile`, `__import__`,
  `vars`, `globals`, `importlib`, `gc`, `ctypes`, `inspect`, `sys.modules` and the interpreter's hooks,
  frames and tracebacks, code objects, `__subclasses__`, private parts of a library (`torch._C`,
  `Variable._execution_engine`), IPython's shell and history, magics that run other code, a module
  the judge does not read;
- the instructor's grader (`autograder.grader`, its answer keys) and the course's `solutions/`;
- every refusal of the by-hand judge (`autograder.grader.judge`), with its rule.

A flag is not a verdict: the judge's refusals cost their points, the rest is there to be read (code
outside the by-hand answers runs nowhere they are graded).
"""
import dataclasses

from autograder.grader import judge
from autograder.grader.notebook_code import Finding, NotebookCode, Site, code_cells
from autograder.grader.reading import Reader

SHOWN_CHARS = 200  # of a flagged line, in the report


@dataclasses.dataclass(frozen=True)
class Flag:
    cell: int  # 1-based, as the notebook shows cells
    line: int  # 1-based within the cell
    what: str
    text: str


def scan(nb, base: judge.Baseline, examination: judge.Examination | None = None) -> list:
    """The flags of a submission: what its own lines reach, and what the judge refused (`examination`: the
    judge's reading of it, where it was read already)."""
    code = NotebookCode(code_cells(nb))
    reader = Reader(code)
    try:
        for cell in code.cells:
            if not cell.test:
                reader.read_cell(cell)
    except RecursionError:  # code nested past what Python's own stack can walk
        reader.findings.append(Finding(Site(0, 0, ""), "nests its code too deeply to be read", "reflection"))
    lines = judge.cell_lines(nb)
    found = [f for f in reader.findings if not f.site.cell or not base.released(f, lines)]
    found += [verdict.finding for verdict in (examination or judge.examine(nb, base)).verdicts.values()]
    flags = {}
    for finding in found:
        site = finding.site
        flags.setdefault((site.cell, site.line, finding.what), Flag(site.cell, site.line, finding.what,
                                                                    site.text[:SHOWN_CHARS]))
    return sorted(flags.values(), key=lambda f: (f.cell, f.line, f.what))
