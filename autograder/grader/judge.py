"""The rules that make an exercise "by hand", judged from the submitted source, in the grader.

Each notebook declares its rules once, next to its exercises (`BY_HAND` in
`autograder.checks.<notebook's package>.rules`); the kernel's guards read the same declaration.
A guard inside the student's kernel can be switched off by the code it guards; this judge reads the
submission instead, where nothing the student runs can reach it, and judges only what is graded:

- **the reach** (`autograder.grader.reach`): for each ruled graded name, the top-level statements its
  answer needs (its definitions, what they read, and so on), and nothing else of the notebook. Code
  outside every reach never costs a point: the flags (`autograder.grader.flags`) list it for the
  instructor, nothing more;
- **powerless, not forbidden**: the by-hand exercises are graded in a fresh kernel that has run the
  answer program (the reach of all of them, the course's set-up statements included) and nothing
  else (`Examination.program`, run first by autograder/grader/sandbox.py and by `ByHandFirst` for
  plain nbgrader), so that a patch, a later rebinding or a module written in another cell never
  runs where they are graded;
- **an allow-list inside the reach** (`autograder.grader.answer_reading`): every call and attribute
  must resolve to something the rule allows; what the judge cannot type, and what the rule refuses,
  scores 0 with the cell, the line and what to write instead.

Student statements that run as the program loads (outside function bodies, or in functions called
then) cannot patch or reflect either: such a finding in any by-hand answer's statements costs every
by-hand exercise, since it runs where all of them are graded. The kernel-side guards still run: they
are the second opinion. Class grading applies the verdicts in `autograder.grader.recording` (both
modes); plain `nbgrader autograde` in `ByHandRules`.
"""
import ast
import dataclasses
import functools
import importlib
import pathlib

import nbformat
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.grader import colab, reach
from autograder.grader.answer_reading import AnswerReader
from autograder.grader.notebook_code import Finding, Site, code_cells, is_test_cell

DANGEROUS = ("store", "reflection")  # findings that change what other answers' names mean, where they all run


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The notebook as students receive it: its lines and statements are the course's, not theirs."""
    name: str
    lines: frozenset
    statements: frozenset = frozenset()  # ast.dump of each of its top-level statements (reach.released_statements)

    def released(self, finding, cells: dict) -> bool:
        """Whether every line of a finding's construct is a line of the released notebook.
        `cells`: {cell number: its lines} of the submission."""
        cell_lines = cells.get(finding.site.cell, [])
        span = finding.lines or range(finding.site.line, finding.site.line + 1)
        return all(0 < n <= len(cell_lines) and cell_lines[n - 1].strip() in self.lines for n in span)


def cell_lines(nb) -> dict:
    """{cell number: its lines} of a notebook, cells numbered from 1 as the notebook shows them."""
    return {i: (c.source if isinstance(c.source, str) else "".join(c.source)).splitlines()
            for i, c in enumerate(nb.cells, start=1)}


def released_lines(nb) -> frozenset:
    """Every line of a notebook's code cells (as IPython would run them), stripped."""
    return frozenset(line.strip() for cell in nb.cells if cell.cell_type == "code"
                     for line in (cell.source if isinstance(cell.source, str) else "".join(cell.source)).splitlines())


@functools.lru_cache(maxsize=64)
def baseline(root: pathlib.Path, name: str) -> Baseline:
    """What students of `name` were given: notebooks/ (Colab cell included) where the course has it, else
    release/ or the source, with the Colab first cell in any case."""
    bootstrap = colab.bootstrap_source()
    colab_statements = reach.released_statements(
        [c for c in code_cells(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(bootstrap)]))])
    colab_lines = {line.strip() for line in bootstrap.splitlines()}
    for path in (root / "notebooks" / f"{name}.ipynb", root / "release" / name / f"{name}.ipynb",
                 root / "solutions" / name / f"{name}.ipynb"):
        if path.is_file():
            nb = nbformat.read(path, as_version=4)
            if path.parent.name == name and path.parent.parent.name == "solutions":
                for cell in nb.cells:  # the source's answers are not what students were given
                    if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                        cell.source = ""
            return Baseline(name, frozenset(released_lines(nb) | colab_lines),
                            reach.released_statements(code_cells(nb)) | colab_statements)
    return Baseline(name, frozenset(colab_lines), colab_statements)


def rules_of(name: str) -> dict:
    """{graded name: rule} of a notebook, as its checks package declares them (none where it has no rules)."""
    try:
        return dict(importlib.import_module(f"autograder.checks.nb{name}.rules").BY_HAND)
    except ModuleNotFoundError:
        return {}


def graded_name(grade_id: str) -> str:
    return grade_id.split("-")[0]


@dataclasses.dataclass(frozen=True)
class Verdict:
    graded: str
    finding: object  # notebook_code.Finding
    rule: object  # the rule the answer broke
    elsewhere: bool = False  # the finding is in another answer's statements, which run where this one is graded

    def message(self) -> str:
        where = (" (in statements of another by-hand answer, which run where this exercise is graded)"
                 if self.elsewhere else "")
        if self.finding.kind == "forbidden":
            return f"{self.graded}: {self.finding.site} {self.finding.what}{where}"
        why = ("this exercise is by hand, and the judge reads its answer as an allow-list: every name, call and "
               "attribute must be one it can tell is allowed")
        return f"{self.graded}: {self.finding.site} {self.finding.what}{where}: {why}"


@dataclasses.dataclass
class Examination:
    """What the judge found in one submission."""
    verdicts: dict  # graded name -> Verdict, for every ruled name whose answer breaks its rule
    program: list  # reach.ProgramCell: what the fresh kernel runs before the by-hand exercises are graded
    by_hand: list  # indices of the grade cells whose graded name has a rule, in order


def examine(nb, base: Baseline, rules: dict | None = None) -> Examination:
    """The verdicts and the answer program of a notebook (`rules`: {graded name: rule}, its own by default)."""
    rules = rules_of(base.name) if rules is None else rules
    by_hand = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and is_test_cell(cell)
               and graded_name(str(cell.metadata.nbgrader.get("grade_id", ""))) in rules]
    if not rules or not by_hand:
        return Examination({}, [], by_hand)
    try:
        return _examine(nb, base, rules, by_hand)
    except RecursionError:  # code nested past what Python's own stack can walk: unreadable, so unjudgeable
        unreadable = Finding(Site(0, 0, ""), "nests its code too deeply for the judge to read", "unreadable")
        return Examination({graded: Verdict(graded, unreadable, rules[graded]) for graded in rules}, [], by_hand)


def _examine(nb, base, rules, by_hand) -> Examination:
    cells = code_cells(nb)
    found = reach.statements(cells, base.statements)
    roots = {graded: {graded} for graded in rules}
    for index in by_hand:
        graded = graded_name(str(nb.cells[index].metadata.nbgrader.get("grade_id", "")))
        source = nb.cells[index].source
        roots[graded] |= reach.test_cell_reads(source if isinstance(source, str) else "".join(source))
    reached = {graded: reach.reach(found, names, through_course=False) for graded, names in roots.items()}
    answer = reach.reach(found, set().union(*roots.values()))
    given = frozenset(path for s in found if s.course for node in ast.walk(s.node)
                      if isinstance(node, ast.ImportFrom) and not node.level for path in _imported(node))
    tests = [cell.tree for cell in cells if cell.test]
    return Examination(_verdicts(rules, reached, answer, given, tests), reach.program(answer), by_hand)


def _imported(node):
    return [f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"]


def _verdicts(rules, reached, answer, given, tests) -> dict:
    student = [s for s in answer if not s.course]
    findings = {}
    for rule in dict.fromkeys(rules.values()):
        reader = AnswerReader(answer, rule, frozenset().union(*map(own_names, reached.values())), given, tests)
        for statement in student:
            reader.read(statement)
        findings[rule] = reader.findings
    loaded = _run_as_it_loads(answer)
    unrunnable = [Finding(statement.cell.site(statement.node), "cannot be run as the judge read it (IPython would "
                          "read one of its lines as a magic or a shell command)", "reflection")
                  for statement in student if not reach.unchanged_by_ipython(statement.source)]
    verdicts, everyones = {}, frozenset().union(*map(own_names, reached.values()))
    for graded, rule in sorted(rules.items()):
        mine, own = set(map(id, reached[graded])), own_names(reached[graded])
        candidates = [(f, False) for f in findings[rule] if id(f.home) in mine and not (
            f.unless_own and f.unless_own in (own if f.kind == "forbidden" else everyones))]
        candidates += [(f, True) for f in findings[rule] if f.kind in DANGEROUS and (
            not f.nested or id(f.home) in loaded) and id(f.home) not in mine and not (
            f.unless_own and f.unless_own in everyones)]
        first = min(candidates, key=lambda pair: _order(_site(pair[0])), default=None)
        if first is not None:
            verdicts[graded] = Verdict(graded, _notebook_finding(first[0]), rule, first[1])
        elif unrunnable:
            verdicts[graded] = Verdict(graded, unrunnable[0], rule)
    return verdicts


def own_names(statements) -> frozenset:
    """Attribute names the learner's own classes define: their bodies' names, what their methods store on their
    first parameter (`self.grad = ...`, `ctx.lse = ...`), and the fields of named tuples."""
    found = set()
    for statement in statements:
        for node in ast.walk(statement.node):
            if isinstance(node, ast.ClassDef):
                for part in node.body:
                    if isinstance(part, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        found.add(part.name)
                    for target in _assigned(part):
                        found |= {t.id for t in ast.walk(target) if isinstance(t, ast.Name)}
                for method in node.body:
                    first = method.args.posonlyargs + method.args.args if isinstance(
                        method, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
                    if first:
                        found |= {t.attr for t in ast.walk(method) if isinstance(t, ast.Attribute)
                                  and isinstance(t.ctx, ast.Store) and isinstance(t.value, ast.Name)
                                  and t.value.id == first[0].arg}
            elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(("namedtuple", "NamedTuple")):
                found |= {c.value for part in node.args[1:] for c in ast.walk(part)
                          if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.isidentifier()}
                found |= {w for part in node.args[1:2] if isinstance(part, ast.Constant) and isinstance(part.value, str)
                          for w in part.value.replace(",", " ").split()}
    return frozenset(found)


def _assigned(node):
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, ast.AnnAssign):
        return [node.target]
    return []


def _run_as_it_loads(statements) -> set:
    """Ids of the statements whose functions may run while the program loads: those that bind a name read outside
    every function body (a call at top level, a decorator, a default, a class body), and what they read in turn."""
    names = set()
    for statement in statements:
        names |= reach.load_reads(statement.node)
    loaded = set()
    while True:
        more = [s for s in statements if id(s) not in loaded and s.binds & names]
        if not more:
            return loaded
        for statement in more:
            loaded.add(id(statement))
            names |= statement.reads


def _site(finding) -> Site:
    return finding.home.cell.site(finding.node)


def _notebook_finding(finding) -> Finding:
    return Finding(_site(finding), finding.what, finding.kind, finding.home.cell.lines_of(finding.node))


def _order(site):
    return site.cell, site.line


def judge(nb, base: Baseline, rules: dict | None = None) -> dict:
    """{graded name: Verdict} for every ruled name of the notebook whose answer breaks its rule."""
    return examine(nb, base, rules).verdicts


def cell_verdicts(nb, base: Baseline, examination: Examination | None = None) -> dict:
    """{grade_id: message} for the grade cells whose graded name the judge refuses."""
    verdicts = (examination or examine(nb, base)).verdicts
    found = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and is_test_cell(cell) and graded_name(str(meta.get("grade_id", ""))) in verdicts:
            found[meta["grade_id"]] = verdicts[graded_name(meta["grade_id"])].message()
    return found


def apply(nb, verdicts: dict):
    """Give every grade cell the judge refused an error output with its message, first (it then scores 0, and
    the verdict that names the line is the message kept, whatever the guards in the kernel said after it),
    unless it holds that verdict already (the grader never ran it)."""
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and isinstance(meta, dict) and meta.get("grade_id") in verdicts:
            message = verdicts[meta["grade_id"]]
            outputs = cell.setdefault("outputs", [])
            if not any(o.get("ename") == "ByHandRule" and o.get("evalue") == message for o in outputs):
                outputs.insert(0, refusal(message))
    return nb


def refusal(message: str):
    return nbformat.v4.new_output("error", ename="ByHandRule", evalue=message, traceback=[f"ByHandRule: {message}"])


def course_root(config) -> pathlib.Path:
    return pathlib.Path(CourseDirectory(config=config).root).resolve()


class ByHandRules(NbGraderPreprocessor):
    """For plain `nbgrader autograde`: after the notebook has run, the judge's verdicts (nbgrader_config.py)."""

    def preprocess(self, nb, resources):
        name = resources.get("nbgrader", {}).get("assignment")
        if name:
            apply(nb, cell_verdicts(nb, baseline(course_root(self.config), name)))
        return nb, resources

