"""A notebook's code as the judge and the flags read it, never run: cells, names, what a name stands for.

A notebook is its code cells, parsed as IPython runs them (magics turned into Python first).
`NotebookCode` knows every name the cells bind at top level (a definition, an import, an
assignment); `Scope` the names a function binds itself. What a name or an attribute chain stands
for is a `Path` on a module (looked up on the real modules here, in the grader, by their public
names: `lookup`, `canonical`), a `Definition` of the notebook, a `Builtin`, or `UNKNOWN` (a
parameter, a call's result). `autograder.grader.reading` walks code with them.
"""
import ast
import dataclasses
import functools
import importlib
import importlib.util
import site
import sys
import types

from IPython.core.inputtransformer2 import TransformerManager

# Modules a submission may use and the judge reads: the only ones ever imported here, to look their public
# names up (a module outside this list is code the judge does not follow; autograder.grader.reading).
KNOWN_MODULES = frozenset({
    "torch", "numpy", "math", "cmath", "random", "functools", "itertools", "operator", "collections", "dataclasses",
    "typing", "abc", "enum", "contextlib", "warnings", "time", "datetime", "statistics", "fractions", "decimal",
    "numbers", "string", "re", "copy", "heapq", "bisect", "array", "textwrap", "json", "csv", "pprint", "os", "sys",
    "io", "errno", "types", "pathlib", "tempfile", "shutil", "glob", "subprocess", "socket", "struct", "hashlib",
    "base64", "zlib", "uuid", "secrets", "platform", "logging", "triton", "matplotlib", "ipywidgets", "tqdm",
    "graphviz", "autograder"})

def lookup(path: str):
    """The real object a public dotted path names (`torch.nn.functional.silu`), or None where it does not
    exist, is private, or starts outside KNOWN_MODULES (nothing else is ever imported here)."""
    return resolve(path, KNOWN_MODULES)


@functools.lru_cache(maxsize=8192)
def resolve(path: str, roots: frozenset, private: bool = False):
    """The real object a dotted path names, from a module of `roots` (nothing else is ever imported here), or
    None where it does not exist or, unless `private`, where a part of it is private."""
    parts = path.split(".")
    if parts[0] not in roots or (not private and any(p.startswith("_") for p in parts)):
        return None
    try:
        obj = importlib.import_module(parts[0])
    except Exception:  # a known module that this grader lacks (matplotlib on a bare machine)
        return None
    for i, part in enumerate(parts[1:], start=1):
        found = getattr(obj, part, _MISSING)
        if found is _MISSING and isinstance(obj, types.ModuleType):
            try:
                found = importlib.import_module(".".join(parts[: i + 1]))
            except Exception:
                return None
        if found is _MISSING:
            return None
        obj = found
    return obj


_MISSING = object()


@functools.lru_cache(maxsize=1024)
def installed(top: str) -> bool:
    """Whether a top-level module is Python's own or installed in this environment (the kernel's too): found,
    never imported. A module a notebook wrote into its own folder is neither: its code is the student's."""
    if top in sys.stdlib_module_names:
        return True
    if not top.isidentifier():
        return False
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    places = [*site.getsitepackages(), site.getusersitepackages()]
    return spec is not None and any(str(spec.origin or "").startswith(place) for place in places)


@functools.lru_cache(maxsize=8192)
def canonical(path: str, roots: frozenset = KNOWN_MODULES, private: bool = False) -> str:
    """The path through its last module's own name: `torch.nn.functional.torch.autograd` is `torch.autograd`."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        obj = resolve(".".join(parts[:i]), roots, private)
        if isinstance(obj, types.ModuleType):
            return ".".join([obj.__name__, *parts[i:]])
    return path


def constant_getattr(node):
    """(object, name) for `getattr(obj, "name")` or `getattr(obj, "name", default)`, else None: an attribute
    written another way."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) in (2, 3) and not node.keywords and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str) and node.args[1].value.isidentifier()):
        return node.args[0], node.args[1].value
    return None


# --- what a name or an expression stands for -------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Path:
    """A module or an attribute chain on one: `torch.autograd.grad`."""
    dotted: str

    def attribute(self, name):
        return Path(f"{self.dotted}.{name}")


@dataclasses.dataclass(frozen=True)
class Definition:
    """A top-level binding of the notebook: a def, a class, or an assignment's value."""
    name: str
    node: ast.AST  # FunctionDef, ClassDef, or the value expression of an assignment (None: unknown)
    cell: "Cell"
    kind: str  # "def", "class", "value"


@dataclasses.dataclass(frozen=True)
class Builtin:
    name: str


UNKNOWN = None  # a parameter, a call's result, a subscript: what a value will be is not known here


@dataclasses.dataclass(frozen=True)
class Site:
    cell: int  # 1-based, as the notebook shows cells
    line: int  # 1-based within the cell
    text: str

    def __str__(self):
        return f"cell {self.cell}, line {self.line} ({self.text[:100]})" if self.cell else "the notebook"


@dataclasses.dataclass(frozen=True)
class Finding:
    site: Site
    what: str  # "reaches torch._C", "calls exec", ...
    kind: str  # "reflection", "store" (a patch), "answers" (the grader, solutions) or "forbidden" (by a rule)
    lines: range = dataclasses.field(default=range(0), compare=False)  # the lines of the construct, in its cell


# --- cells ---------------------------------------------------------------------------------------
@dataclasses.dataclass(eq=False)
class Cell:
    number: int
    source: str
    tree: ast.Module
    test: bool  # a test cell (rebuilt from the source by the grader, never the student's)
    offset: int = 0  # lines before the code (a cell magic's body starts on line 2)

    def site(self, node) -> Site:
        line = getattr(node, "lineno", 1) + self.offset
        lines = self.source.splitlines()
        text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        return Site(self.number, line, text)

    def lines_of(self, node) -> range:
        first = getattr(node, "lineno", 1)
        return range(first + self.offset, getattr(node, "end_lineno", first) + self.offset + 1)


_transformer = TransformerManager()


def parse_cell(source: str):
    """The cell as IPython would compile it, or None where it does not (it then defines nothing)."""
    try:
        return ast.parse(_transformer.transform_cell(source))
    except Exception:  # SyntaxError, or a transformer that gives up: the cell raises when run
        return None


def is_test_cell(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return isinstance(meta, dict) and bool(meta.get("grade")) and not meta.get("solution")


def code_cells(nb) -> list:
    """Every code cell that parses, numbered as the notebook shows cells."""
    found = []
    for number, cell in enumerate(nb.cells, start=1):
        if cell.cell_type != "code":
            continue
        source = cell.source if isinstance(cell.source, str) else "".join(cell.source)
        tree = parse_cell(source)
        if tree is not None:
            found.append(Cell(number, source, tree, is_test_cell(cell)))
    return found


# --- magics, as IPython turns them into code -------------------------------------------------------
def magic(node):
    """(kind, name, code) for `get_ipython().run_line_magic(name, arg)` and its relatives, else None.
    kind: "line", "cell" or "shell"; code: the magic's argument (a cell magic's body) where constant."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name)
            and node.func.value.func.id == "get_ipython" and not node.func.value.args):
        return None
    method, args = node.func.attr, node.args
    constant = all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args)
    if method == "run_line_magic" and len(args) == 2 and constant:
        return "line", args[0].value, args[1].value
    if method == "run_cell_magic" and len(args) == 3 and constant:
        return "cell", args[0].value, args[2].value
    if method in ("system", "getoutput") and len(args) == 1 and constant:
        return "shell", method, args[0].value
    return "other", method, None


# --- the names a notebook binds --------------------------------------------------------------------
class NotebookCode:
    """Every code cell of a notebook and every name its cells bind at top level."""

    def __init__(self, cells):
        self.cells = cells
        self.bindings = {}  # name -> [("import", dotted) | ("star", module) | Definition]
        for cell in cells:
            for statement in cell.tree.body:
                self._bind(statement, cell)
            for node in ast.walk(cell.tree):  # `global x` in a function binds x here too
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    declared = {n for s in ast.walk(node) if isinstance(s, ast.Global) for n in s.names}
                    for name, value in assignments(node, declared):
                        self._add(name, Definition(name, value, cell, "value"))

    def _add(self, name, binding):
        self.bindings.setdefault(name, []).append(binding)

    def _bind(self, node, cell):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._add(node.name, Definition(node.name, node, cell, "def"))
        elif isinstance(node, ast.ClassDef):
            self._add(node.name, Definition(node.name, node, cell, "class"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for name, binding in import_bindings(node):
                self._add(name, binding)
        else:
            for name, value in assignments(node, None, top=True):
                self._add(name, Definition(name, value, cell, "value"))
            for child in nested_statements(node):
                self._bind(child, cell)

    def definitions(self, name, tests=True) -> list:
        return [b for b in self.bindings.get(name, ()) if isinstance(b, Definition) and (tests or not b.cell.test)]


def import_bindings(node):
    """(name, ("import", dotted)) for each name an import statement binds; ("star", module) for `*`."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                yield alias.asname, ("import", alias.name)
            else:
                top = alias.name.split(".")[0]
                yield top, ("import", top)
    elif node.level:  # a relative import: a module of the student's own, nothing the judge reads
        for alias in node.names:
            yield alias.asname or alias.name, ("import", "." * node.level + (node.module or ""))
    else:
        for alias in node.names:
            if alias.name == "*":
                yield "*", ("star", node.module)
            else:
                yield alias.asname or alias.name, ("import", f"{node.module}.{alias.name}")


def nested_statements(node):
    """Statements inside a compound statement's blocks (if, for, while, try, with): they run at this level."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    blocks = []
    for field in ("body", "orelse", "finalbody"):
        blocks += getattr(node, field, []) or []
    for handler in getattr(node, "handlers", []) or []:
        blocks += handler.body
    for case in getattr(node, "cases", []) or []:
        blocks += case.body
    return [b for b in blocks if isinstance(b, ast.stmt)]


def target_names(target):
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from target_names(element)
    elif isinstance(target, ast.Starred):
        yield from target_names(target.value)


def assignments(node, only=None, top=False):
    """(name, value expression or None) for names a statement binds; in a function with `only`, the
    assignments to those (global) names anywhere in it. `top`: the statement itself, not its blocks."""
    walk = [node] if top else list(ast.walk(node))
    for n in walk:
        pairs = []
        if isinstance(n, ast.Assign):
            single = len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
            pairs = [(name, n.value if single else None) for t in n.targets for name in target_names(t)]
        elif isinstance(n, ast.AnnAssign) and n.value is not None:
            pairs = [(name, n.value) for name in target_names(n.target)]
        elif isinstance(n, ast.AugAssign):
            pairs = [(name, None) for name in target_names(n.target)]
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
            pairs = [(name, None) for name in target_names(n.target)]
        elif isinstance(n, (ast.With, ast.AsyncWith)):
            pairs = [(name, None) for item in n.items if item.optional_vars is not None
                     for name in target_names(item.optional_vars)]
        elif isinstance(n, ast.ExceptHandler) and n.name:
            pairs = [(n.name, None)]
        elif isinstance(n, ast.NamedExpr):
            pairs = [(name, n.value) for name in target_names(n.target)]
        elif isinstance(n, (ast.Import, ast.ImportFrom)) and only is not None:
            pairs = [(name, None) for name, _ in import_bindings(n)]
        if top and not pairs:
            for sub in ast.walk(n):  # a walrus inside a top-level expression binds at top level
                if isinstance(sub, ast.NamedExpr):
                    pairs += [(name, sub.value) for name in target_names(sub.target)]
        for name, value in pairs:
            if only is None or name in only:
                yield name, value


# --- scopes ---------------------------------------------------------------------------------------
class Scope:
    """The names a function (or lambda, comprehension, class body) binds itself, with what each may hold."""

    def __init__(self, node, parent):
        self.parent = parent
        self.names = {}  # name -> [expression or None, or ("import", dotted)]
        self.globals = set()
        self.is_class = isinstance(node, ast.ClassDef)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            arguments = node.args
            positional = arguments.posonlyargs + arguments.args
            defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
            for arg, default in zip(positional, defaults):
                self.names.setdefault(arg.arg, []).extend([None] + ([default] if default is not None else []))
            for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults):
                self.names.setdefault(arg.arg, []).extend([None] + ([default] if default is not None else []))
            for arg in (arguments.vararg, arguments.kwarg):
                if arg is not None:
                    self.names.setdefault(arg.arg, []).append(None)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            for generator in node.generators:
                for name in target_names(generator.target):
                    self.names.setdefault(name, []).append(None)
            return
        body = node.body if isinstance(node.body, list) else []
        for statement in _own_statements(body):
            if isinstance(statement, ast.Global):
                self.globals |= set(statement.names)
            elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.names.setdefault(statement.name, []).append(None)
            elif isinstance(statement, (ast.Import, ast.ImportFrom)):
                for name, binding in import_bindings(statement):
                    self.names.setdefault(name, []).append(binding)
            else:
                for name, value in assignments(statement, top=True):
                    self.names.setdefault(name, []).append(value)
        for name in self.globals:
            self.names.pop(name, None)


def _own_statements(body):
    """Every statement of a block and of its nested blocks, but not of nested functions or classes."""
    stack = list(body)
    while stack:
        statement = stack.pop()
        yield statement
        stack.extend(nested_statements(statement))
