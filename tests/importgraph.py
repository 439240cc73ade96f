"""The `autograder` package's imports, read with `ast` (nothing is imported): who imports whom.

Every import statement counts, at module level or inside a function, and so do
`importlib.import_module("...")` and `__import__("...")` called with a literal name. An import
names the module it loads: `from autograder.checks import compare` is an edge to
`autograder.checks.compare`, `from autograder.checks import expect_close` one to the package
`autograder.checks`. Parent packages that Python runs on the way are not edges of their own.

`private_uses` finds where one module reaches a private name (`_name`) of another: imported
(`from autograder.checks.compare import _check_meta`) or read through a module it imported
(`student_calls._TimeLimit`).
"""
import ast
import dataclasses
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = "autograder"


@dataclasses.dataclass(frozen=True)
class Import:
    source: str   # the importing module
    target: str   # the module it loads (the longest name that is a module of the tree)
    line: int
    path: str     # the importing file, relative to the tree it was read from

    def __str__(self):
        return f"{self.path}:{self.line}: {self.source} imports {self.target}"


def module_name(path: pathlib.Path, base: pathlib.Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(base=ROOT, package=PACKAGE) -> dict:
    """{dotted name: file} of every module of `package` under the folder `base`."""
    return {module_name(p, base): p for p in sorted((base / package).rglob("*.py"))
            if "__pycache__" not in p.parts}


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of a (possibly relative) `from ... import` target."""
    if level == 0:
        return name or ""
    anchor = module.split(".") if is_package else module.split(".")[:-1]
    anchor = anchor[: len(anchor) - (level - 1)] if level > 1 else anchor
    return ".".join(anchor + ([name] if name else []))


def _literal(call: ast.Call) -> str | None:
    """The module name of `importlib.import_module("x")`, `import_module("x")`, `__import__("x")`."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in ("import_module", "__import__") or not call.args:
        return None
    first = call.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def raw_imports(tree: ast.AST, module: str, is_package: bool):
    """(line, absolute dotted name) of everything a module's source imports, anywhere in it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module)
            for alias in node.names:
                # `from a.b import c`: c may be a module (a.b.c) or a name in a.b; resolve() decides
                yield node.lineno, f"{base}.{alias.name}" if alias.name != "*" else base
        elif isinstance(node, ast.Call):
            name = _literal(node)
            if name:
                yield node.lineno, name


def resolve(name: str, known) -> str | None:
    """The longest prefix of `name` that is a known module, or None when it is outside the tree."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def imports(base=ROOT, package=PACKAGE) -> list:
    """Every import of one module of `package` by another (or by itself, left out), in file order."""
    found = modules(base, package)
    edges = []
    for module, path in found.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name in raw_imports(tree, module, path.name == "__init__.py"):
            target = resolve(name, found) if name.split(".")[0] == package else None
            if target and target != module:
                edges.append(Import(module, target, line, str(path.relative_to(base))))
    return edges


def graph(edges) -> dict:
    """{module: set of modules it imports}."""
    out = {}
    for edge in edges:
        out.setdefault(edge.source, set()).add(edge.target)
    return out


def cycles(edges) -> list:
    """The strongly connected components of more than one module (each holds at least one
    import cycle), as sorted lists, found with Tarjan's algorithm walked with an explicit stack."""
    adjacency = graph(edges)
    nodes = sorted(set(adjacency) | {t for targets in adjacency.values() for t in targets})
    index, low, on_stack, stack, components, counter = {}, {}, set(), [], [], 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(adjacency.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(adjacency.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(components)


def cycle_path(component, edges) -> list:
    """One import cycle through the first module of a component, as the Imports that close it
    (shortest, by breadth-first search inside the component)."""
    members = set(component)
    by_source = {}
    for edge in edges:
        if edge.source in members and edge.target in members:
            by_source.setdefault(edge.source, []).append(edge)
    start = component[0]
    came_from, frontier = {start: None}, [start]
    while frontier:
        following = []
        for node in frontier:
            for edge in by_source.get(node, ()):
                if edge.target == start:
                    path = [edge]
                    while came_from[path[0].source] is not None:
                        path.insert(0, came_from[path[0].source])
                    return path
                if edge.target not in came_from:
                    came_from[edge.target] = edge
                    following.append(edge.target)
        frontier = following
    return []


@dataclasses.dataclass(frozen=True)
class PrivateUse:
    source: str   # the module that reaches the name
    target: str   # the module that defines it
    name: str
    line: int
    path: str

    def __str__(self):
        return f"{self.path}:{self.line}: {self.source} uses {self.target}.{self.name}"


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(base=ROOT, package=PACKAGE) -> list:
    """Every private name of one module of `package` that another imports, or reads as an attribute of a
    module it imported (`import a.b as m; m._x`, `from a import b; b._x`), in file order."""
    found = modules(base, package)
    uses = []
    for module, path in found.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        bound = {}  # local name -> module of the tree it names
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in found:
                        bound[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                origin = _absolute(module, is_package, node.level, node.module)
                for alias in node.names:
                    if f"{origin}.{alias.name}" in found:
                        bound[alias.asname or alias.name] = f"{origin}.{alias.name}"
                    elif origin in found and origin != module and is_private(alias.name):
                        uses.append(PrivateUse(module, origin, alias.name, node.lineno, str(path.relative_to(base))))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and is_private(node.attr) and isinstance(node.value, ast.Name)
                    and bound.get(node.value.id, module) != module):
                target = bound[node.value.id]
                uses.append(PrivateUse(module, target, node.attr, node.lineno, str(path.relative_to(base))))
    return sorted(uses, key=lambda u: (u.path, u.line))
