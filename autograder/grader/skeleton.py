"""`backprop-course new NN_name "Title"`: a new notebook's skeleton, every file that docs/adding_a_notebook.md's
checklist names, laid out so that the course's tests pass before the real notebook is written.

Why a command: a notebook touches ten places (its solution notebook, checks package and its by-hand rules, quiz
file, mutation catalogue, two registries of the tests, two tables of the README, its release), and the
tests say what is missing only one failure at a time. The skeleton is one example exercise
(autograder/grader/skeleton_text.py) in every one of those places; tests/test_skeleton.py runs the command in
a copy of the repository and runs the course's tests there, so the checklist cannot go stale.

Everything is computed before anything is written: a name already taken, or a registry whose shape the
command does not know, stops it with a message that names the file, and leaves the repository as it was.
"""
import ast
import dataclasses
import pathlib
import re

from autograder.grader import colab
from autograder.grader import skeleton_text as text

NAME = re.compile(r"(\d\d)_[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
PLACEHOLDER = re.compile(r"@[A-Z]+@")
# (file, the top-level dict the entry goes into, the entry)
REGISTRIES = (("tests/test_derive.py", "DERIVED", text.DERIVED_ENTRY),
              ("tests/test_quiz_content.py", "HIDDEN_SNIPPETS", text.HIDDEN_SNIPPET_ENTRY))
NOTEBOOK_ROW = re.compile(r"\| (\d\d) \| ")
RULES_HEADER = "| notebook | exercises | rule |"


class SkeletonError(ValueError):
    """The skeleton cannot be laid out; the message names the file and what is wrong."""


@dataclasses.dataclass(frozen=True)
class Skeleton:
    name: str  # 10_attention
    title: str

    @property
    def number(self) -> str:
        return self.name[:2]

    @property
    def package(self) -> str:
        """The checks package: `nb` and the notebook's name (a module name cannot start with a digit)."""
        return f"nb{self.name}"

    def fill(self, template: str) -> str:
        """`template` with its @PLACEHOLDERS@ filled in; one left unfilled is a bug of the templates."""
        values = {"NOTEBOOK": self.name, "NUMBER": self.number, "TITLE": self.title, "PACKAGE": self.package,
                  "BADGE": colab.BADGE_IMAGE, "COLAB": colab.colab_url(f"{self.name}.ipynb")}
        filled = PLACEHOLDER.sub(lambda m: values.get(m[0].strip("@"), m[0]), template)
        left = PLACEHOLDER.findall(filled)
        if left:
            raise AssertionError(f"skeleton templates: no value for {', '.join(sorted(set(left)))}")
        return filled


def checked(name: str, title: str) -> Skeleton:
    if not NAME.fullmatch(name):
        raise SkeletonError(f"{name!r} is not a notebook name: two digits, an underscore, then lower-case words "
                            "joined by underscores (10_attention)")
    if not title.strip() or "|" in title or "\n" in title or "@" in title:
        raise SkeletonError(f"the title {title!r} must be one line, without '|' (it goes in the README's table) "
                            "or '@'")
    return Skeleton(name, title.strip())


# --- the new files ---------------------------------------------------------------------------------------------
def notebook_json(skeleton: Skeleton, with_review: bool) -> str:
    """The solution notebook: nbgrader's cell metadata, the course's (answer forms, trusted grading), cell ids
    as the course's notebooks number them (md-00, code-01, ...)."""
    import nbformat  # here: only laying out a notebook needs it

    nb = nbformat.v4.new_notebook()
    nb.metadata = {"course": {"trusted_grading": True},
                   "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    for index, (kind, source) in enumerate(text.cells(with_review)):
        source = skeleton.fill(source)
        if kind == "markdown":
            cell = nbformat.v4.new_markdown_cell(source, id=f"md-{index:02d}")
        else:
            cell = nbformat.v4.new_code_cell(source, id=f"code-{index:02d}")
        if kind == "solution":
            cell.metadata = {"course": {"answer_forms": text.ANSWER_FORMS},
                             "nbgrader": {"grade": False, "grade_id": f"{text.EXERCISE}_solution", "locked": False,
                                          "schema_version": 3, "solution": True}}
        elif kind == "grade":
            cell.metadata = {"nbgrader": {"grade": True, "grade_id": text.EXERCISE, "locked": True,
                                          "points": text.POINTS, "schema_version": 3, "solution": False}}
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


def new_files(root: pathlib.Path, skeleton: Skeleton) -> dict:
    """{path: text} of the files the skeleton adds; none may exist yet."""
    quizzes = root / "autograder" / "learner" / "quizzes"
    earlier = sorted(p.stem for p in quizzes.glob("*.yaml") if p.stem < skeleton.name)
    checks = root / "autograder" / "checks" / skeleton.package
    files = {root / "solutions" / skeleton.name / f"{skeleton.name}.ipynb": notebook_json(skeleton, bool(earlier)),
             checks / "__init__.py": skeleton.fill(text.CHECKS_FACE),
             checks / "cube.py": skeleton.fill(text.CHECKS_MODULE),
             checks / "rules.py": skeleton.fill(text.RULES_MODULE),
             quizzes / f"{skeleton.name}.yaml": skeleton.fill(text.QUIZ),
             root / "tests" / "mutants" / f"{skeleton.package}.py": skeleton.fill(text.CATALOGUE)}
    taken = [p for p in [*files, root / "solutions" / skeleton.name, checks] if p.exists()]
    same_number = sorted(p.name for p in (root / "solutions").glob(f"{skeleton.number}_*"))
    if taken or same_number:
        raise SkeletonError(f"notebook {skeleton.number} exists already: "
                            + ", ".join([str(p.relative_to(root)) for p in taken] + same_number))
    return files


# --- the registries and the README ---------------------------------------------------------------------------------
def with_entry(source: str, where: str, variable: str, entry: str, key: str) -> str:
    """`source` with `entry` added as the last line of its top-level dict `variable`, whose `}` closes on a line
    of its own."""
    tree = ast.parse(source)
    found = [node.value for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
             and any(isinstance(t, ast.Name) and t.id == variable for t in node.targets)]
    if len(found) != 1:
        raise SkeletonError(f"{where}: no `{variable} = {{...}}` at the top level to add this entry to:\n{entry}")
    (mapping,) = found
    keys = [ast.literal_eval(k) for k in mapping.keys if k is not None and isinstance(k, (ast.Constant, ast.Tuple))]
    if any(k == key or (isinstance(k, tuple) and k and k[0] == key) for k in keys):
        raise SkeletonError(f"{where}: {variable} has an entry for {key} already")
    lines = source.splitlines(keepends=True)
    if lines[mapping.end_lineno - 1].strip() != "}":
        raise SkeletonError(f"{where}: {variable}'s closing brace is not on a line of its own; add by hand:\n{entry}")
    lines.insert(mapping.end_lineno - 1, entry)
    return "".join(lines)


def with_row(readme: str, row: str, rows: list, sort_key, table: str) -> str:
    """`readme` with `row` added among the lines `rows` (the indices of a table's rows), in `sort_key`'s order."""
    if not rows:
        raise SkeletonError(f"README.md: no row of {table} found; add by hand:\n{row}")
    lines = readme.splitlines(keepends=True)
    before = [i for i in rows if sort_key(lines[i]) < sort_key(row)]
    lines.insert(before[-1] + 1 if before else rows[0], row)
    return "".join(lines)


def readme_with_rows(readme: str, skeleton: Skeleton) -> str:
    """The README with the notebook's row in the notebooks' table and in the by-hand rules' table."""
    if re.search(rf"^\| {skeleton.number} \| ", readme, re.M):
        raise SkeletonError(f"README.md: the notebooks' table has a row {skeleton.number} already")
    numbered = [i for i, line in enumerate(readme.splitlines()) if NOTEBOOK_ROW.match(line)]
    readme = with_row(readme, skeleton.fill(text.README_ROW), numbered, lambda line: NOTEBOOK_ROW.match(line)[1],
                      "the notebooks' table")
    lines = readme.splitlines()
    if RULES_HEADER not in lines:
        raise SkeletonError(f"README.md: no table headed {RULES_HEADER!r} (the by-hand rules)")
    start = lines.index(RULES_HEADER) + 2  # past the header and its |---| line
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("| ")), len(lines))
    return with_row(readme, skeleton.fill(text.README_RULE_ROW), list(range(start, end)), str, "the by-hand rules")


def registrations(root: pathlib.Path, skeleton: Skeleton) -> dict:
    """{path: new text} of the files the skeleton adds an entry to."""
    changed = {}
    for relative, variable, entry in REGISTRIES:
        path = root / relative
        if not path.is_file():
            raise SkeletonError(f"{relative} is missing: is {root} the course's repository?")
        changed[path] = with_entry(path.read_text(encoding="utf-8"), relative, variable, skeleton.fill(entry),
                                   skeleton.name)
    readme = root / "README.md"
    changed[readme] = readme_with_rows(readme.read_text(encoding="utf-8"), skeleton)
    return changed


def lay_out(root: pathlib.Path, name: str, title: str) -> list:
    """Write the skeleton of notebook `name` into the repository at `root`; return the paths written, new
    files first. The release of the notebook (notebooks/) is the caller's next step: `backprop-course new`
    runs it."""
    skeleton = checked(name, title)
    files = new_files(root, skeleton)
    changed = registrations(root, skeleton)
    for path, content in [*files.items(), *changed.items()]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return [*files, *changed]
