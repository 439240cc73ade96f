"""Flag what in a submission reaches for the grader, for the instructor to read.

A kernel cannot be stopped from patching what runs in its own process (the checks' guards
included): in plain mode that is where the test cells run, and in trusted mode a patched guard can
still change what the kernel answers. What it cannot hide is its source. Every line a student wrote
(a line of a code cell that the released notebook does not have) is scanned for references to the
grading package's internals, interpreter hooks, code objects, the garbage collector's object lists,
ctypes, builtins and the answer keys. A flag is not a verdict: the score stands, and
`reports/flags.csv` lists each hit so that someone reads it.
"""
import dataclasses
import re

# (what it is, a pattern that finds it in one line of code)
PATTERNS = (
    ("the grading package's internals", re.compile(r"\bautograder\s*\.\s*(checks|grader)\b|"
                                                   r"\bfrom\s+autograder\s+import\s+(checks|grader)\b")),
    ("an answer key", re.compile(r"\banswer_key\b|\bsolutions\s*/")),
    ("an interpreter hook", re.compile(r"\b(sys|threading)\s*\.\s*(setprofile|settrace|addaudithook|meta_path|"
                                       r"path_hooks|excepthook)\b|\bsys\.monitoring\b")),
    ("sys.modules", re.compile(r"\bsys\s*\.\s*modules\b")),
    ("a function's code, closure or globals", re.compile(r"__code__|__closure__|__globals__|__wrapped__|"
                                                          r"\bco_(name|qualname|filename|firstlineno|code)\s*=")),
    ("the garbage collector's object lists", re.compile(r"\bgc\s*\.\s*get_(objects|referrers|referents)\b")),
    ("ctypes", re.compile(r"\bctypes\b")),
    ("builtins", re.compile(r"\b__builtins__\b|\bimport\s+builtins\b|\bbuiltins\s*\.")),
)
SHOWN_CHARS = 200  # of a flagged line, in the report


@dataclasses.dataclass(frozen=True)
class Flag:
    cell: int  # 1-based, as the notebook shows cells
    line: int  # 1-based within the cell
    what: str
    text: str


def released_lines(nb) -> set:
    """Every line of the released notebook's code cells, stripped: what the student did not write."""
    return {line.strip() for cell in nb.cells if cell.cell_type == "code" for line in cell.source.splitlines()}


def _test_cell(cell) -> bool:
    """A test cell: class grading rebuilds it from the source (hidden tests included), whatever was sent."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return isinstance(meta, dict) and bool(meta.get("grade")) and not meta.get("solution")


def scan(nb, released: set) -> list:
    """The flags of a submission's own lines: code cells but the test cells, less the lines the release has."""
    found = []
    for number, cell in enumerate(nb.cells, start=1):
        if cell.cell_type != "code" or _test_cell(cell):
            continue
        for line_number, line in enumerate(cell.source.splitlines(), start=1):
            if line.strip() in released:
                continue
            for what, pattern in PATTERNS:
                if pattern.search(line):
                    found.append(Flag(number, line_number, what, line.strip()[:SHOWN_CHARS]))
    return found
