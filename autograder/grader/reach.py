"""What a notebook's by-hand answers reach: the top-level statements they need, and the program that runs them.

A by-hand exercise is judged on its answer and on what that answer reaches, never on the rest of the
notebook. Its reach is found from its graded name (and the names its test cell reads): every top-level
statement that binds one of those names, stores into one (`Value.__add__ = ...`, `cache[k] = ...`) or
changes one through a method (`history.append(...)`), then, in turn, every statement that binds a
name those statements read, anywhere in them (`symtable`, Python's own reading of scopes). A name
bound only by imports is a module: a statement that changes a module (`torch.relu = ...`) is never
part of a reach.

The answer program is the reach of all of a notebook's by-hand exercises, statement by statement in
the notebook's order, in one cell per notebook cell: the by-hand exercises are graded in a fresh kernel
that has run that program and nothing else (autograder/grader/sandbox.py), so that a patch, a later
rebinding or a module written in any other cell never runs there. The judge reads exactly the
statements the program holds (`autograder.grader.answer_reading`).
"""
import ast
import builtins
import dataclasses
import symtable

from IPython.core.inputtransformer2 import TransformerManager

from autograder.grader.notebook_code import Cell, magic, nested_statements, parse_cell

# Magics whose argument is Python the notebook runs: their statements are the cell's own.
CODE_MAGICS = {"time", "timeit", "prun", "capture"}
_transformer = TransformerManager()
BUILTINS = frozenset(vars(builtins))


@dataclasses.dataclass(eq=False)
class Statement:
    """One top-level statement of a code cell (a code magic's statements count as the cell's)."""
    cell: Cell
    node: ast.stmt
    course: bool  # a statement of the notebook as released: its text is the course's, not the student's
    binds: frozenset  # names it binds at top level (in a function too, with `global`)
    imports: frozenset  # of those, the names it binds by an import
    touches: frozenset  # names whose objects it changes: stores into attributes or items, method calls
    reads: frozenset  # global names it reads, anywhere in it (function bodies included)
    star: bool = False  # it imports every name of a module (`from m import *`)

    @property
    def source(self) -> str:
        return ast.unparse(self.node)


def statements(cells, released: frozenset) -> list:
    """Every top-level statement of the notebook's cells that are not test cells, in order.
    `released`: `ast.dump`s of the statements of the notebook as released (`released_statements`)."""
    found = []
    for cell in cells:
        if cell.test:
            continue
        for node, home in _top_level(cell):
            binds, imports, reads = _names(node)
            star = any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in _executed(node))
            found.append(Statement(home, node, ast.dump(node) in released, binds, imports, _touched(node), reads,
                                   star))
    return found


def released_statements(cells) -> frozenset:
    """The `ast.dump` of every top-level statement of the notebook as released, test cells aside."""
    return frozenset(ast.dump(node) for cell in cells if not cell.test for node, _ in _top_level(cell))


def _top_level(cell):
    """(statement, the cell it reads from) for each statement at the top of `cell`, a code magic's opened."""
    for node in cell.tree.body:
        inner = _magic_body(node, cell)
        if inner is None:
            yield node, cell
        else:
            yield from _top_level(inner)


def _magic_body(node, cell):
    """The cell a line or cell magic's code makes (`%%time`, `%timeit f(x)`), or None."""
    found = magic(node.value) if isinstance(node, ast.Expr) else None
    if found is None or found[0] not in ("line", "cell") or found[1] not in CODE_MAGICS or found[2] is None:
        return None
    tree = parse_cell(found[2])
    if tree is None:
        return None
    shift = cell.offset + node.lineno - (0 if found[0] == "cell" else 1)
    return Cell(cell.number, cell.source, tree, cell.test, shift)


def _names(node) -> tuple:
    """(names bound, names bound by imports, global names read) of one statement, as `symtable` sees them."""
    try:
        table = symtable.symtable(ast.unparse(node), "<statement>", "exec")
    except (SyntaxError, ValueError, RecursionError):  # `return` or `await` outside a function: fails when run
        return frozenset(), frozenset(), frozenset()
    binds, imports, reads = set(), set(), set()
    for symbol in table.get_symbols():
        if symbol.is_assigned() or symbol.is_imported():
            binds.add(symbol.get_name())
        if symbol.is_imported() and not symbol.is_assigned():
            imports.add(symbol.get_name())
        if symbol.is_referenced():
            reads.add(symbol.get_name())
    stack = list(table.get_children())
    while stack:
        child = stack.pop()
        stack.extend(child.get_children())
        for symbol in child.get_symbols():
            if symbol.is_declared_global() and (symbol.is_assigned() or symbol.is_imported()):
                binds.add(symbol.get_name())
            if symbol.is_global() and symbol.is_referenced():
                reads.add(symbol.get_name())
    return frozenset(binds), frozenset(imports), frozenset(reads)


def load_reads(node) -> frozenset:
    """The global names a statement reads as it runs: outside every function body (class bodies run)."""
    try:
        table = symtable.symtable(ast.unparse(node), "<statement>", "exec")
    except (SyntaxError, ValueError, RecursionError):
        return frozenset()
    reads = {s.get_name() for s in table.get_symbols() if s.is_referenced()}
    stack = [child for child in table.get_children() if child.get_type() == "class"]
    while stack:
        child = stack.pop()
        stack.extend(c for c in child.get_children() if c.get_type() == "class")
        reads |= {s.get_name() for s in child.get_symbols() if s.is_global() and s.is_referenced()}
    return frozenset(reads)


def _root(node):
    """The name an attribute or item chain starts from (`a` of `a.b[0].c`), or None."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _touched(node) -> frozenset:
    """Names whose objects a statement changes as it runs at top level: a store or `del` into an attribute or
    an item of theirs (an augmented one too), or a method call that is a statement of its own."""
    found = set()
    for statement in _executed(node):
        targets = []
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
            targets = [statement.target]
        elif isinstance(statement, ast.Delete):
            targets = statement.targets
        elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
                and isinstance(statement.value.func, ast.Attribute):
            targets = [statement.value.func]
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, (ast.Attribute, ast.Subscript)) and _root(part):
                    found.add(_root(part))
    return frozenset(found)


def _executed(node):
    """A statement and the statements of its blocks that run with it (not function or class bodies)."""
    stack = [node]
    while stack:
        statement = stack.pop()
        yield statement
        stack.extend(nested_statements(statement))


def reach(found: list, roots, through_course=True) -> list:
    """The statements of `found` (in order) that the names `roots` need, and what those need in turn; a name
    nothing binds may come from a star import, so those come too. Without `through_course`, what the course's
    own statements read is not followed: the statements an answer needs of its own."""
    values = {name for s in found for name in s.binds - s.imports}  # names the notebook binds to values
    bound = {name for s in found for name in s.binds}
    needed, taken = set(roots), set()
    while True:
        unbound = bool(needed - bound - BUILTINS)
        more = [i for i, s in enumerate(found) if i not in taken and (
            s.binds & needed or s.touches & needed & values or (s.star and unbound))]
        if not more:
            return [found[i] for i in sorted(taken)]
        for i in more:
            taken.add(i)
            if through_course or not found[i].course:
                needed |= found[i].reads


@dataclasses.dataclass(frozen=True)
class ProgramCell:
    """One cell of the answer program: the reached statements of one notebook cell."""
    index: int  # the notebook cell's index (0-based), where the program cell runs
    source: str


def program(reached: list) -> list:
    """The answer program: one ProgramCell per notebook cell with reached statements, in order. Its text is
    the statements' own, unparsed, which IPython runs as it stands (`unchanged_by_ipython` holds it)."""
    cells = {}
    for statement in reached:
        cells.setdefault(statement.cell.number, []).append(statement.source)
    return [ProgramCell(number - 1, "\n".join(sources)) for number, sources in cells.items()]


def unchanged_by_ipython(source: str) -> bool:
    """Whether IPython runs `source` as it is (no line of it taken for a magic, a shell command or help)."""
    try:
        return _transformer.transform_cell(source).rstrip("\n") == source.rstrip("\n")
    except Exception:
        return False


def test_cell_reads(source: str) -> frozenset:
    """The global names a test cell reads and does not bind itself: what its check needs from the notebook."""
    tree = parse_cell(source)
    if tree is None:
        return frozenset()
    binds, reads = set(), set()
    for node in tree.body:
        bound, _, read = _names(node)
        binds |= bound
        reads |= read
    return frozenset(reads - binds)
